"""Opening versus creating a store (issue #20 item 2): ``refold.open`` opens an existing store and
refuses a missing one instead of silently creating an empty memory at a mistyped path; creating
is ``refold.init`` (or an explicit ``open(..., create=True)``). Errors name the Python call to a
Python caller and the ``refold`` command to a CLI user. Real stores in tmp_path.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import refold
from refold.cli import main


def test_open_refuses_a_missing_store_and_creates_nothing(tmp_path):
    missing = tmp_path / "memroy"  # a typo of "memory"
    with pytest.raises(refold.NotFoundError) as info:
        refold.open(missing)
    message = str(info.value)
    assert str(missing) in message and f"refold.init({str(missing)!r})" in message
    assert "\n" not in message
    assert not missing.exists()  # nothing half-written


def test_open_an_existing_store(tmp_path):
    refold.init(tmp_path / "s", mode="shred")
    mem = refold.open(tmp_path / "s")
    assert mem.mode == "shred" and mem.head().seq == -1


def test_open_create_true_creates_once_then_opens(tmp_path):
    mem = refold.open(tmp_path / "s", create=True, mode="shred")
    mem.append({"kind": "chat_turn", "content": "hi", "source": "chat#1"})
    again = refold.open(tmp_path / "s", create=True)  # existing: opened, not recreated
    assert again.mode == "shred" and again.log().height == 1


def test_init_on_an_existing_store_names_open_to_python_callers(tmp_path):
    refold.init(tmp_path / "s")
    with pytest.raises(refold.StoreError, match=r"refold\.open\("):
        refold.init(tmp_path / "s")


def test_cli_on_a_missing_store_names_refold_init_not_python(tmp_path):
    result = CliRunner().invoke(main, ["facts", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"refold: error: no refold store at {tmp_path / 'nope'}; "
                                     f"create one with `refold init {tmp_path / 'nope'}`")
    assert not (tmp_path / "nope").exists()


def test_cli_init_twice_does_not_tell_a_shell_user_to_call_python(tmp_path):
    assert CliRunner().invoke(main, ["init", str(tmp_path / "s")]).exit_code == 0
    result = CliRunner().invoke(main, ["init", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "already a refold store" in result.stderr and "refold.open" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
