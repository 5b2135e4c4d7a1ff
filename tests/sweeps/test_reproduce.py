"""sweeps/reproduce.py: --list with citations, one-line errors, every recipe plans at every scale without
training (the --hardware path needs no local timing), and every recipe's smoke run end to end
with the paper-vs-run table printed first and written (slow)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps import reproduce
from sweeps.recipes import RECIPES, SCALES

REPO = Path(__file__).resolve().parents[2]
RUNNABLE = [name for name, r in RECIPES.items() if not r.not_runnable]


def test_list_shows_every_recipe_with_its_citation_rows_differences_protocol_and_notes(capsys):
    assert reproduce.main(["--list"]) == 0
    out = capsys.readouterr().out
    for r in RECIPES.values():
        assert r.name in out and r.citation.title in out and r.citation.table in out
        assert all(f"{v.paper_name} -> {v.label}" in out and v.source in out for v in r.variants)
        assert all(d in out for d in r.differs) and r.protocol.text in out
        assert all(f"scale {name}: {s.note}" in out for name, s in r.scales.items())
    assert "Devlin" in out and "full - mlm_pairs on QNLI (acc): 88.4 vs 84.9 (+3.5)" in out
    assert "No NSP -> mlm_pairs: mlm_pairs on nsp_pairs; token masking 15%, 80% [MASK] / 10% random; 1,000,000 " \
           "steps (100,000 at 512) x 256 x 128; AdamW lr 0.0001, betas 0.9/0.999" in out
    assert "differs: whole-word masking, not n-gram (n <= 3) masking" in out  # next to ALBERT's rows
    assert "15% masking, all [MASK] -> full_sentences@0.15: full_sentences on full_sentences; token masking 15%, " \
           "100% [MASK] / 0% random" in out
    assert "(extra row: --extra-rows)" in out and "median of 10 fine-tuning runs" in out
    unverified = [c for r in RECIPES.values() for c in r.claims if not c.verified]
    assert ("[unverified]" in out) == bool(unverified)  # a number not read in its source says so


@pytest.mark.parametrize("argv, words", [(["nope"], "allowed: bert-t5"), (["bert-t5", "--scale", "huge"], "smoke, quick, paper")])
def test_bad_name_and_scale_are_one_line_exit_2(argv, words, capsys):
    assert reproduce.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_every_recipe_runs():
    assert RUNNABLE == list(RECIPES)  # roberta-t2 included, now that its formats are input formats


def test_roberta_t2_maps_each_paper_format_to_a_registered_format():
    from sweeps.recipes import roberta_t2
    from trainables.objectives import VARIANTS

    r = RECIPES["roberta-t2"]
    formats = {v.paper_name: VARIANTS[v.variant].input_format for v in r.variants}
    assert formats == {"SEGMENT-PAIR+NSP": "nsp_pairs", "SENTENCE-PAIR+NSP": "sentence_pairs",
                       "FULL-SENTENCES": "full_sentences", "DOC-SENTENCES": "single"}
    assert {VARIANTS[v.variant].weights.get("nsp", 0) > 0 for v in r.variants if "NSP" not in v.paper_name} == {False}
    pair = next(v for v in r.variants if v.paper_name == "SENTENCE-PAIR+NSP")
    assert any("larger batch" in d for d in pair.differs) and all(s.startswith("https://") for s in roberta_t2.SOURCES)


def test_recipe_variants_are_registered_and_claims_name_them():
    from trainables.objectives import VARIANTS

    for name in RUNNABLE:
        r = RECIPES[name]
        labels = {v.label for v in r.variants}
        assert all(v.variant in VARIANTS for v in r.variants) and set(r.scales) == set(SCALES)
        assert all(c.plus in labels and c.minus in labels for c in r.claims)


@pytest.mark.parametrize("name", RUNNABLE)
@pytest.mark.parametrize("scale", SCALES)
def test_every_recipe_plans_at_every_scale(name, scale, tmp_path, capsys):
    rc = reproduce.main([name, "--scale", scale, "--plan", "--hardware", "h100", "--mfu", "0.4", "--gpus", "8",
                         "--price-per-gpu-hour", "2.5", "--storage", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "GPU-hours on h100" in out and "plan on h100" in out
    total = [line for line in out.splitlines() if line.startswith("total") and "$" in line]
    assert total, out
    r = RECIPES[name]
    assert f"scale {scale}: {r.scales[scale].note}" in out and "protocol, paper:" in out and "protocol, this run:" in out
    assert all(f"{v.paper_name} -> {v.label}:" in out and v.source in out for v in r.rows())
    assert all(f"every row differs: {d}" in out for d in r.differs)
    assert all(f"differs: {d}" in out for v in r.rows() for d in v.differs)
    # past smoke, each row is also a curve over tokens: its runs keep snapshots and the probe reads them
    assert any(line.startswith("snapshots ") for line in out.splitlines()) == (scale != "smoke"), out
    if scale == "paper":  # each row's tokens and FLOPs beside 6 N T at the paper's size
        assert "planned vs the paper's own size" in out and "6 N T" in out
        assert all(any(line.startswith(v.label + " ") for line in out.splitlines()) for v in r.rows())


def test_the_plan_counts_the_extra_rows_when_asked(tmp_path, capsys):
    base = ["bert-t5", "--scale", "paper", "--plan", "--hardware", "h100", "--storage", str(tmp_path)]
    assert reproduce.main(base) == 0
    plain = capsys.readouterr().out
    assert reproduce.main(base + ["--extra-rows"]) == 0
    extra = capsys.readouterr().out
    runs = [[line.split()[1] for line in o.splitlines() if line.startswith("measure")][0] for o in (plain, extra)]
    assert runs == ["6", "9"] and "extra rows not trained (--extra-rows): mlm_only" in plain


def test_gpu_hours_and_cost_arithmetic():
    # 1 EFLOP at 1000 TFLOPS x 50% is 2000 s = 0.556 GPU-h
    assert reproduce.gpu_hours(1e18, 1000.0, 0.5) == pytest.approx(1e18 / 5e14 / 3600)
    line = reproduce._cost_line("total", 1, 1e9, 3.6e18, 1000.0, 1.0, 2, 2.0)
    assert line.split()[5] == "1"  # 3.6e18 FLOPs at 1 PFLOP/s: one GPU-hour
    assert "30.0 m" in line and "$2" in line  # over 2 GPUs: 30 minutes of wall; at $2 per GPU-hour


def test_peak_tflops_plans_without_a_named_accelerator(tmp_path, capsys):
    assert reproduce.main(["wettig-mask", "--scale", "paper", "--plan", "--peak-tflops", "400", "--mfu", "0.35",
                           "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "400 TFLOPS peak" in out and "plan on" not in out  # the shared wall column needs a named rate


SMOKE_RUNS = [("bert-t5", "full - mlm_pairs", 5), ("electra-t1", "electra - mlm_only", 1),
              ("roberta-t2", "sentence_pair - segment_pair", 3), ("albert-t5", "mlm_sop - full", 5),
              ("wettig-mask", "full_sentences@0.40 - full_sentences@0.15", 3)]


def test_every_recipe_has_a_smoke_run():
    assert sorted(n for n, *_ in SMOKE_RUNS) == sorted(RUNNABLE)


@pytest.fixture(scope="module")
def one_ray_session():
    """The recipes' smoke runs after the first share this process and its Ray session, as a script running
    several sweeps does (``sweeps.runner.init_ray`` keeps a session it finds): each in its own interpreter spent
    ~10 s of a ~25 s run starting Python, torch, transformers and Ray again. Shut down after the last."""
    yield
    import ray

    ray.shutdown()


def _smoke_run(name: str, tmp_path: Path, capsys, in_process: bool) -> str:
    argv = [name, "--scale", "smoke", "--storage", str(tmp_path), "--name", "run", "--quiet", "--tasks", "sentiment",
            "--seeds", "2"]
    if in_process:
        assert reproduce.main(argv) == 0
        return capsys.readouterr().out
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "sweeps" / "reproduce.py"), *argv], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name, contrast, rows", SMOKE_RUNS)
def test_smoke_end_to_end_prints_and_writes_the_paper_table(name, contrast, rows, tmp_path, capsys, one_ray_session):
    """~20-30 s each on 2 cores (roberta-t2: 4 variants, albert-t5 3): smoke preset, x 2 seeds, one task (half
    the fine-tuning trials). The first runs as the command a user types (its own interpreter), the others
    through the same ``main`` in this process."""
    out, c = _smoke_run(name, tmp_path, capsys, in_process=name != SMOKE_RUNS[0][0]), RECIPES[name].citation
    assert f"{c.authors} {c.year}, {c.table} vs this run" in out
    assert out.index("vs this run") < out.index("This run pretrained")  # the paper's table opens the report
    report = tmp_path / "run" / "report"
    md = (report / "paper_vs_run.md").read_text()
    assert md.count(f"| {contrast} |") == rows and "paper's task not measured" in md
    assert (report / "paper_vs_run.png").stat().st_size > 0 and (report / "contributions.md").exists()
    r = RECIPES[name]
    assert f"scale smoke: {r.scales['smoke'].note}" in md and "protocol, paper:" in md
    assert all(f"{v.paper_name} -> {v.label}:" in md for v in r.rows())  # what each row trained, from the export
    assert all(f"| {c.metric} |" in md for c in r.claims_of(r.rows()))  # the paper's metric per row
    if r.intrinsic:
        assert "intrinsic metrics vs this run" in md and "| mlm_sop | SOP | 86.5 | pair_acc_sop |" in md
