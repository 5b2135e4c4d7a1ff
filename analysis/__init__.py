"""Exported sweeps -> contribution estimates with confidence intervals -> tables, plots, notebook.

    export.py         load_export(dir) -> Export(runs, evals, predictions), checked against the schema
                      python -m analysis.export merge A B --out C  (pool runs of other pretraining seeds)
    stats.py          per-example sufficient statistics of every metric (bootstrap = weighted sums)
    bootstrap.py      multibootstrap(measurements, contrasts, rng) -> [Interval]  (MultiBERTs-style)
    variants.py       variant_specs(runs) -> what each variant is (weights, input format); sort_variants
    contrasts.py      derive_contrasts(specs) -> [ContrastDef] from weights and formats, not by name
    baseline.py       chance_baseline(metric, golds): was a task learned at all?
    inference.py      holm(p), power / mde / contrast_power: what the design can detect
    flags.py          collapse and worse-than-none flags, and the notes they put on contrasts
    contributions.py  estimate_contributions(export, rng) -> Contributions (contrasts, flags, messages)
    headline.py       headline(contributions): the report's opening sentences
    search.py         summarize_search(runs) -> SearchSummary (response, fANOVA / PED-ANOVA importance)
    plots.py          per-task bars, the forest plot of contrasts, the search response (PNG)
    report.py         build_report(dir) -> Report; format_table(report); write_report(report, out)
                      python -m analysis.report EXPORT_DIR [--out DIR]
    domain.py         estimate_domain_shift(export, rng): before vs after domain-adaptive pretraining
    simulate.py       simulated ablations with known truth (one task, a three-task average, power)
    validate.py       python -m analysis.validate --simulations N --json  (coverage, Holm, average row)
                      python -m analysis.validate --power                 (predicted vs detected power)
"""
