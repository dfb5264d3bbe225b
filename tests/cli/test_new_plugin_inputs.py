"""``accelctl new-plugin`` on awkward input: every refusal is clear and leaves nothing behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from cliharness import Cli

from accelctl._contract.info import is_valid_name
from accelctl.cli._scaffold import MAX_NAME_LENGTH


@pytest.mark.parametrize("name", ["npu\n", "npu ", "npu\t", " npu", "np\nu", "npu\r\n"])
def test_names_with_white_space_are_refused(cli: Cli, name: str, tmp_path: Path) -> None:
    result = cli("new-plugin", name, "--path", str(tmp_path))
    assert result.exit_code == 2
    assert "is not a valid accelerator name" in result.stderr
    if name.strip() == "npu":
        assert "did you mean 'npu'?" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_final_newline_is_no_valid_name_anywhere() -> None:
    # re's "$" matches before a final newline: names from entry points and aliases too.
    assert not is_valid_name("npu\n") and is_valid_name("npu")


def test_a_name_too_long_for_file_names_is_refused(cli: Cli, tmp_path: Path) -> None:
    result = cli("new-plugin", "a" * 300, "--path", str(tmp_path))
    assert result.exit_code == 2
    assert f"is 300 characters long: an accelerator name has at most {MAX_NAME_LENGTH}" in (
        " ".join(result.stderr.split())
    )
    assert list(tmp_path.iterdir()) == []
    assert cli("new-plugin", "a" * MAX_NAME_LENGTH, "--path", str(tmp_path)).exit_code == 0


def test_a_missing_path_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "not" / "there"
    result = cli("new-plugin", "npu", "--path", str(missing))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert not (tmp_path / "not").exists()


def test_an_unwritable_path_is_a_usage_error(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path.chmod(0o500)
    if os.geteuid() == 0:
        # Root may write into a read-only folder (though not on a read-only file system): the
        # system answers for this folder as it does for another user.
        access = os.access
        monkeypatch.setattr(
            os,
            "access",
            lambda path, mode, **kw: (
                access(path, mode, **kw)
                and not (mode == os.W_OK and os.fspath(path) == str(tmp_path))
            ),
        )
    try:
        result = cli("new-plugin", "npu", "--path", str(tmp_path))
    finally:
        tmp_path.chmod(0o700)
    assert result.exit_code == 2
    assert "is not writable" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_is_one_line_and_leaves_nothing_behind(
    cli: Cli, tmp_path: Path, monkeypatch
) -> None:
    real_write = Path.write_text
    writes: list[Path] = []

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        writes.append(self)
        if len(writes) == 3:  # a disk that fills up half way through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)
    result = cli("new-plugin", "npu", "--path", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: cannot write the package accelctl-npu into {tmp_path}: No space left on "
        "device; nothing was left behind. Choose another --path\n"
    )
    assert list(tmp_path.iterdir()) == []
