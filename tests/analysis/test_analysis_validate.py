"""The validation command prints coverage JSON."""

import json

from analysis.validate import main


def test_validate_cli_json(capsys):
    assert main(["--simulations", "5", "--boot", "100", "--json", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 5 and 0 <= out["coverage"] <= 1 and out["seconds"] > 0
    assert set(out["per_contrast"]) >= {"full - nsp_only", "full - none", "interaction"}
