"""What the data tests share: a preparation killed part way (an interrupted run must lose nothing finished)."""

import pytest

import trainables.data.prepare as prepare


class _Killer:
    def __init__(self, monkeypatch):
        self.monkeypatch, self.real = monkeypatch, prepare.tokenize_unit

    def after(self, n: int) -> None:
        """From now on preparation dies (KeyboardInterrupt) once ``n`` units have been tokenized."""
        real, calls = self.real, []

        def dies(unit, *args):
            if len(calls) == n:
                raise KeyboardInterrupt("killed")
            calls.append(unit["id"])
            return real(unit, *args)
        self.monkeypatch.setattr(prepare, "tokenize_unit", dies)

    def revive(self) -> None:
        self.monkeypatch.setattr(prepare, "tokenize_unit", self.real)


@pytest.fixture
def kill_preparation(monkeypatch):
    return _Killer(monkeypatch)
