"""Exported sweeps -> contribution estimates with confidence intervals -> tables, plots, notebook.

    export.py         load_export(dir) -> Export(runs, evals, predictions), checked against the schema
    stats.py          per-example sufficient statistics of every metric (bootstrap = weighted sums)
    bootstrap.py      multibootstrap(measurements, contrasts, rng) -> [Interval]  (MultiBERTs-style)
    contributions.py  estimate_contributions(export, rng) -> Contributions (contrasts, flags, messages)
    search.py         summarize_search(runs) -> SearchSummary (response, fANOVA / PED-ANOVA importance)
    report.py         build_report(dir) -> Report; format_table(report); write_report(report, out)
                      python -m analysis.report EXPORT_DIR [--out DIR]
    validate.py       python -m analysis.validate --simulations N --json  (coverage of the intervals)
"""
