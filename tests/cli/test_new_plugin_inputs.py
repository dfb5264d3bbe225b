"""``accelctl new-plugin`` on awkward input: every refusal is clear and leaves nothing behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from accelctl._info import is_valid_name
from accelctl._scaffold import MAX_NAME_LENGTH
from accelctl.cli import cli


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name", ["npu\n", "npu ", "npu\t", " npu", "np\nu", "npu\r\n"])
def test_names_with_white_space_are_refused(name: str, tmp_path: Path) -> None:
    result = invoke("new-plugin", name, "--path", str(tmp_path))
    assert result.exit_code == 2
    assert "is not a valid accelerator name" in result.stderr
    if name.strip() == "npu":
        assert "did you mean 'npu'?" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_final_newline_is_no_valid_name_anywhere() -> None:
    # re's "$" matches before a final newline: names from entry points and aliases too.
    assert not is_valid_name("npu\n") and is_valid_name("npu")


def test_a_name_too_long_for_file_names_is_refused(tmp_path: Path) -> None:
    result = invoke("new-plugin", "a" * 300, "--path", str(tmp_path))
    assert result.exit_code == 2
    assert f"is 300 characters long: an accelerator name has at most {MAX_NAME_LENGTH}" in (
        " ".join(result.stderr.split())
    )
    assert list(tmp_path.iterdir()) == []
    assert invoke("new-plugin", "a" * MAX_NAME_LENGTH, "--path", str(tmp_path)).exit_code == 0


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "there"
    result = invoke("new-plugin", "npu", "--path", str(missing))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert not (tmp_path / "not").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_path_is_a_usage_error(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        result = invoke("new-plugin", "npu", "--path", str(tmp_path))
    finally:
        tmp_path.chmod(0o700)
    assert result.exit_code == 2
    assert "is not writable" in result.stderr


def test_a_failed_write_is_one_line_and_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    real_write = Path.write_text
    writes: list[Path] = []

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        writes.append(self)
        if len(writes) == 3:  # a disk that fills up half way through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)
    result = invoke("new-plugin", "npu", "--path", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: cannot write the package accelctl-npu into {tmp_path}: No space left on "
        "device; nothing was left behind. Choose another --path\n"
    )
    assert list(tmp_path.iterdir()) == []
