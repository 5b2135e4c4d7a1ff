"""run.allocator: ``retain`` keeps the memory a step frees for the next step (glibc mallopt) instead of letting
the next step fault it in again page by page; ``system`` leaves the C library's defaults. Each choice is tried
in a fresh process (mallopt is process-wide and permanent), on a step with the MLM head's temporaries, in a
thread as a Ray trial runs it."""

import json
import subprocess
import sys

import pytest

from trainables import runtime
from trainables.config import ConfigError
from trainables.presets import build_config

STEP = r'''
import json, resource, sys, threading, torch
from trainables import runtime
allocator = runtime.set_allocator(sys.argv[1])
torch.set_num_threads(1)
out = {"allocator": list(allocator)}

def work():  # a cpu-small BERT's MLM step (hidden 128, 8,192 pieces, batch 32 x 128): its temporaries
    from trainables.model import build_model
    from trainables.presets import build_config
    torch.manual_seed(0)
    cfg = build_config("cpu-small")
    model = build_model(cfg.model, 8192, 0, 0)
    ids = torch.randint(5, 8192, (32, 128))
    masked = torch.rand(32, 128) < 0.15
    opt, losses = torch.optim.SGD(model.parameters(), lr=0.1), []

    def step():  # MLM logits at the masked positions only, as the pretraining step computes them
        hidden = model.bert(input_ids=ids).last_hidden_state[masked]
        loss = torch.nn.functional.cross_entropy(model.cls.predictions(hidden), ids[masked])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        model.zero_grad(set_to_none=True)

    for _ in range(4):  # the heaps grow to their working size (a thread arena's, as a Ray trial's step runs)
        step()
    faults = []
    for _ in range(9):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    out["faults_per_step"] = sorted(faults)[len(faults) // 2]  # the median step: an occasional heap growth aside
    out["faults"] = faults
    out["logits_pages"] = int(masked.sum()) * 8192 * 4 // 4096  # the step's fp32 MLM logits alone, in 4 KiB pages
    out["losses"] = losses

t = threading.Thread(target=work)  # a Ray Tune function trainable runs in a thread, not the main one
t.start()
t.join()
print(json.dumps(out))
'''


def _steps(*choices: str) -> list[dict]:
    """The step in one fresh process per choice, run side by side."""
    procs = [subprocess.Popen([sys.executable, "-c", STEP, c], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c in choices]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


@pytest.mark.skipif(runtime._mallopt() is None, reason="retain needs glibc's mallopt; this C library is not glibc")
def test_retain_stops_each_step_faulting_its_memory_in_again_and_changes_no_bit():
    system, retain = _steps("system", "retain")
    assert system["allocator"][0] == "system" and retain["allocator"][0] == "retain"
    assert "trim_threshold=1024 MiB" in retain["allocator"][1]
    # with retain the median step faulted 0-1 times on the development machine and 256 once in CI after 2
    # warm-up steps (cause not known; a step now and then grows a heap, which gave retain means of ~990-2,250
    # in some processes); a step with its temporaries faulted in again is ~4,900 for the logits alone. With
    # glibc's defaults it was 4,865-19,500 in most fresh processes but 1 in one (glibc's dynamic threshold had
    # settled), so the defaults' count is not asserted. The bound: a tenth of the logits' pages.
    assert retain["faults_per_step"] < retain["logits_pages"] / 10, {k: retain[k] for k in ("faults", "logits_pages")}
    assert retain["losses"] == system["losses"]  # the same bits


def test_a_process_set_to_retain_says_so_when_a_later_run_asks_for_system(monkeypatch):
    monkeypatch.setattr(runtime, "_allocator_set", runtime.Allocator("retain", "glibc mallopt ..."))
    assert runtime.set_allocator("retain") == ("retain", "glibc mallopt ...")
    name, why = runtime.set_allocator("system")
    assert name == "retain" and "earlier run of this process set retain" in why


def test_a_runs_record_is_what_was_set_not_a_second_setting(monkeypatch):
    """run.json reads the allocator at a run's end without setting it: had the start not set it, the record
    says the C library's defaults were in force."""
    monkeypatch.setattr(runtime, "_allocator_set", None)
    assert runtime.current_allocator("retain") == ("system", "nothing set it in this process: the C library's "
                                                             "defaults")
    assert runtime._allocator_set is None  # reading did not set it


def test_without_glibc_retain_falls_back_to_the_system_allocator_and_says_why(monkeypatch):
    monkeypatch.setattr(runtime, "_allocator_set", None)
    monkeypatch.setattr(runtime, "_mallopt", lambda: None)
    assert runtime.set_allocator("retain") == ("system", "run.allocator=retain needs glibc's mallopt; this C "
                                                         "library is not glibc")


def test_a_bad_allocator_is_refused_in_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match=r"run.allocator='jemalloc' is not valid; allowed: retain, system"):
        build_config("smoke", overrides=["run.allocator=jemalloc"])
    with pytest.raises(ConfigError, match=r"run.allocator='tcmalloc' is not valid; allowed: retain, system"):
        runtime.set_allocator("tcmalloc")


def test_run_json_states_the_allocator_the_run_had(tmp_path):
    from test_precision import _pretrain
    run, _ = _pretrain(tmp_path, "a")
    assert run["config"]["run"]["allocator"] == "retain"
    assert run["allocator"] == runtime.set_allocator("retain").name  # retain, or system where there is no glibc
    assert run["allocator_why"]
