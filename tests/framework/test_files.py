"""framework.core.files: every file written whole, folders swapped whole, torn records dropped, one writer per
folder."""

import json
import os
import subprocess
import sys
import warnings

import pytest

from framework.core import files


def test_a_failed_write_leaves_the_old_content_and_no_temporary(tmp_path):
    path = files.write_text(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError):
        with files.replacing(path) as temporary:
            temporary.write_text("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    files.write_json(path, {"new": 1})
    assert json.loads(path.read_text()) == {"new": 1}


def test_a_checkpoint_that_does_not_load_falls_back_to_the_previous_one(tmp_path):
    path = tmp_path / "checkpoint.pt"
    files.save_torch({"step": 1}, path, keep_previous=True)
    files.save_torch({"step": 2}, path, keep_previous=True)
    assert files.load_torch(path, "test")["step"] == 2
    path.write_bytes(path.read_bytes()[:40])  # torn (as an in-place write killed midway left it)
    with pytest.warns(UserWarning, match="could not be loaded"):
        assert files.load_torch(path, "test")["step"] == 1
    assert (tmp_path / "checkpoint.pt.unreadable").exists()  # kept for a look, never overwritten by the next save
    assert files.load_torch(tmp_path / "missing.pt", "test") is None


def test_a_folder_swap_killed_between_its_renames_is_recovered(tmp_path):
    folder = tmp_path / "best"
    with files.replacing_folder(folder) as temporary:
        (temporary / "weights").write_text("v1")
    with files.replacing_folder(folder) as temporary:
        (temporary / "weights").write_text("v2")
    assert (folder / "weights").read_text() == "v2" and sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    os.replace(folder, tmp_path / "best.old")  # the kill: the old one aside, the new one not yet renamed
    files.recover_folder(folder)
    assert (folder / "weights").read_text() == "v2" and not (tmp_path / "best.old").exists()


def test_a_record_cut_off_by_a_kill_is_dropped_and_the_next_starts_a_line(tmp_path):
    path = tmp_path / "records.jsonl"
    files.append_line(path, json.dumps({"id": 1}))
    with open(path, "a") as f:
        f.write('{"id": 2, "seco')  # the kill
    with pytest.warns(UserWarning, match="last line was cut off"):
        assert files.read_json_lines(path) == [{"id": 1}]
    files.append_line(path, json.dumps({"id": 3}))
    assert files.read_json_lines(path) == [{"id": 1}, {"id": 3}]
    with open(path, "a") as f:
        f.write('{"id": 4}')  # whole, its newline never written: kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["id"] for r in files.read_json_lines(path)] == [1, 3, 4]
    files.append_line(path, json.dumps({"id": 5}))
    assert [r["id"] for r in files.read_json_lines(path)] == [1, 3, 4, 5]
    path.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(ValueError, match=r"lines \[2\] are not JSON"):
        files.read_json_lines(path)


def test_one_writer_per_folder(tmp_path):
    holder = ("import sys, time\nfrom framework.core import files\n"
              "with files.exclusive(sys.argv[1], 'test'):\n    print('held', flush=True)\n    time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(files.FolderBusy, match=f"in use by another test \\(process {child.pid}"):
            with files.exclusive(tmp_path, "test"):
                pass
    finally:
        child.kill()
        child.wait()
    with pytest.warns(UserWarning, match="no longer running"):  # its lock outlived it: taken over
        with files.exclusive(tmp_path, "test"):
            assert (tmp_path / ".lock").read_text().split()[1] == str(os.getpid())
    assert not (tmp_path / ".lock").exists()


def test_a_second_run_in_the_same_second_gets_its_own_folder(tmp_path):
    base = str(tmp_path / "outputs" / "17-00-00")
    os.makedirs(base)  # another run took it
    assert files.fresh_folder(base) == base + "_2"
    assert files.fresh_folder(base) == base + "_2"  # resolved again in the same process: the same folder


def test_save_figure_writes_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = files.save_figure(fig, tmp_path / "plot.png", dpi=30)
    plt.close(fig)
    assert path.read_bytes()[:4] == b"\x89PNG" and sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_what_a_killed_writer_left_goes_at_the_next_write(tmp_path):
    import socket

    dead = tmp_path / f".x.pt.tmp-{socket.gethostname()}-999999-0000"  # pid 999999: no such process
    live = tmp_path / f".x.pt.tmp-{socket.gethostname()}-{os.getpid()}-0000"  # a writer still at work
    dead.write_text("half")
    live.write_text("half")
    files.write_text(tmp_path / "x.pt", "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "x.pt"])
