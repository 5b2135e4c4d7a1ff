"""The terminal shows warnings; the run's log file holds every line (data preparation, the planner, libraries)."""

import logging

import pytest

from sweeps.runner import LOG_FILE, configure_logging, log_to_file


@pytest.fixture(autouse=True)
def _restore_logging():
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for h in [h for h in root.handlers if h not in before]:
        root.removeHandler(h)
        h.close()
    root.setLevel(level)


def test_info_lines_go_to_the_file_and_warnings_to_both(tmp_path, capsys):
    configure_logging(quiet=False)
    path = log_to_file(str(tmp_path / "exp"))
    logging.getLogger("trainables.data.prepare").info("preparing synthetic: 1 units")
    logging.getLogger("sweeps").warning("2 fine-tuning trials failed")
    err = capsys.readouterr().err
    assert "preparing synthetic" not in err and "2 fine-tuning trials failed" in err
    text = (tmp_path / "exp" / LOG_FILE).read_text()
    assert path == str(tmp_path / "exp" / LOG_FILE)
    assert "trainables.data.prepare INFO preparing synthetic: 1 units" in text and "trials failed" in text


def test_verbose_shows_every_line_and_quiet_only_warnings(tmp_path, capsys):
    configure_logging(quiet=False, verbose=True)
    logging.getLogger("trainables.data.prepare").info("prepared builtin")
    assert "prepared builtin" in capsys.readouterr().err
    configure_logging(quiet=True)  # reconfiguring replaces the console handler, it does not add a second
    logging.getLogger("trainables.data.prepare").info("prepared again")
    logging.getLogger("sweeps").warning("a warning")
    err = capsys.readouterr().err
    assert "prepared again" not in err and err.count("a warning") == 1


def test_a_remote_root_has_no_local_log_file():
    assert log_to_file("s3://bucket/exp") is None


def test_every_trial_event_is_in_the_file_once_and_not_twice_on_the_terminal(tmp_path, capsys):
    import io

    from sweeps.progress import Progress
    from tests.sweeps.test_progress import _events

    configure_logging(quiet=False, verbose=True)
    log_to_file(str(tmp_path))
    out = io.StringIO()
    _events(Progress(out=out))  # a log file's quiet lines on its stream: the trials' ends
    text = (tmp_path / LOG_FILE).read_text()
    assert "full-s0 started" in text and "measure done in" in text  # the file has every event
    assert "full-s0 started" not in out.getvalue() + capsys.readouterr().err


def test_the_terminal_handler_follows_stderr_when_the_stream_it_started_with_is_closed(monkeypatch):
    """A sweep run inside a test or a notebook cell: its captured stderr is closed afterwards; later log lines go to
    the stderr of the moment, with no 'Logging error' traceback."""
    import io

    first, later = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    configure_logging(quiet=False)
    first.close()
    monkeypatch.setattr("sys.stderr", later)
    logging.getLogger("sweeps").warning("still shown")
    assert later.getvalue().rstrip().endswith("still shown") and "Logging error" not in later.getvalue()
