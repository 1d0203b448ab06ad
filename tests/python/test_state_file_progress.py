"""progress= of the state file's savers and loaders (orthojit.file_progress): a callable sees
every phase in bytes, up to the file's data size counted here from the state itself; what it
raises (KeyboardInterrupt at Ctrl-C) stops a save with the previous file in place and a load
with nothing changed; True prints the runtime's progress line on sys.stderr."""
import pytest

torch = pytest.importorskip("torch")
import orthojit  # noqa: E402

EXACT = {"muon.backend": "ref", "muon.precision": "f64"}


def stepped(seed, steps=2):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
    optimizer = orthojit.Muon(model.named_parameters(), preset="keller", settings=EXACT)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
    return optimizer


def data_bytes(optimizer):
    """The state file's data: f32 momentum per Muon element, two f32 moments and an i64 step per
    AdamW parameter."""
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            total += 4 * p.numel() if group["use_muon"] else 8 * p.numel() + 8
    return total


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, phase, done, total):
        self.events.append((phase, done, total))

    def phases(self):
        runs = []
        for phase, _, _ in self.events:
            if not runs or runs[-1] != phase:
                runs.append(phase)
        return runs


def test_a_callable_sees_every_phase_of_a_save_and_a_load(tmp_path):
    optimizer = stepped(1)
    path = tmp_path / "state.safetensors"
    expected = data_bytes(optimizer)
    saving = Recorder()
    optimizer.save_state(path, progress=saving)
    assert saving.phases() == ["write", "sync"]
    writes = [(done, total) for phase, done, total in saving.events if phase == "write"]
    assert writes[0] == (0, expected) and writes[-1] == (expected, expected)
    assert all(a[0] <= b[0] for a, b in zip(writes, writes[1:])), "the written bytes went backwards"
    assert len(writes) == 1 + sum(len(group["params"]) * (1 if group["use_muon"] else 3) for group in optimizer.param_groups)
    assert saving.events[-1] == ("sync", 1, 1)

    target = stepped(2, steps=0)
    loading = Recorder()
    target.load_state(path, progress=loading)
    assert loading.phases() == ["read"], "read in the file's order and hashed as read: no second pass for the checksum"
    assert loading.events[0] == ("read", 0, expected) and loading.events[-1] == ("read", expected, expected)
    assert torch.equal(target.state_dict()["state"][0]["momentum_buffer"], optimizer.state_dict()["state"][0]["momentum_buffer"])

    verifying = Recorder()
    summary = orthojit.inspect_state(path, progress=verifying)
    assert summary["checksum_verified"] and verifying.events[-1] == ("checksum", expected, expected)


def test_an_exception_in_the_callable_stops_the_save_and_the_load(tmp_path):
    path = tmp_path / "state.safetensors"
    first = stepped(3)
    first.save_state(path)
    saved = path.read_bytes()

    def interrupt_at(phase, count):
        seen = []

        def progress(at, done, total):
            if at == phase:
                seen.append(done)
                if len(seen) == count:
                    raise KeyboardInterrupt
        return progress

    later = stepped(4, steps=3)
    for phase, count in (("write", 3), ("sync", 2)):
        with pytest.raises(KeyboardInterrupt):
            later.save_state(path, progress=interrupt_at(phase, count))
        assert path.read_bytes() == saved, f"a save stopped at {phase} replaced the file"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["state.safetensors"], "a temporary file was left behind"

    target = stepped(5, steps=1)
    before = {k: v.clone() for k, v in target.state_dict()["state"][0].items()}
    for phase in ("read",):
        with pytest.raises(KeyboardInterrupt):
            target.load_state(path, progress=interrupt_at(phase, 2))
        after = target.state_dict()["state"][0]
        assert all(torch.equal(after[k], v) for k, v in before.items()), f"a load stopped at {phase} changed the state"
        assert target.steps_taken == 1


def test_true_prints_a_line_per_phase_on_a_stderr_that_is_not_a_terminal(tmp_path, capsys):
    optimizer = stepped(6)
    path = tmp_path / "state.safetensors"
    optimizer.save_state(path, progress=True)
    optimizer.load_state(path, progress=True)
    orthojit.inspect_state(path, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    size = f"{data_bytes(optimizer) / 1024:.1f} KiB"
    assert lines[0].startswith(f"saving {path}: write {size} in ") and lines[0].endswith("/s)"), lines
    assert lines[1].startswith(f"saving {path}: sync in "), lines
    assert lines[2].startswith(f"loading {path}: read {size} in "), lines
    assert lines[3].startswith(f"verifying {path}: checksum {size} in "), lines
    assert len(lines) == 4 and "\r" not in captured.err
    optimizer.save_state(path)
    assert capsys.readouterr().err == "", "progress=False printed"


def test_a_bad_progress_argument_is_refused_before_anything_is_written(tmp_path):
    optimizer = stepped(7)
    path = tmp_path / "state.safetensors"
    with pytest.raises(TypeError, match="progress must be True, False, None or a callable"):
        optimizer.save_state(path, progress="yes")
    assert not path.exists()


def test_distributed_muon_reports_its_save_and_load(tmp_path):
    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
    optimizer = orthojit.DistributedMuon(model.named_parameters(), "local", stage=2, preset="keller", settings=EXACT)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    path = tmp_path / "state.safetensors"
    saving, loading = Recorder(), Recorder()
    optimizer.save_state(path, progress=saving)
    expected = data_bytes(optimizer)
    writes = [done for phase, done, _ in saving.events if phase == "write"]
    assert writes[-1] == expected and saving.events[-1] == ("sync", 1, 1)
    assert set(saving.phases()) <= {"write", "checksum", "sync"}
    optimizer.load_state(path, progress=loading)
    assert ("read", expected, expected) in loading.events, "the one rank read the whole file"

    # Interrupted: the save at its flush leaves the file; the load at its first read changes nothing.
    saved, before = path.read_bytes(), optimizer.state_dict()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    stepped_state = optimizer.state_dict()

    def interrupt(at):
        def progress(phase, done, total):
            if phase == at and done > 0:
                raise KeyboardInterrupt
        return progress

    with pytest.raises(KeyboardInterrupt):
        optimizer.save_state(path, progress=interrupt("sync"))
    assert path.read_bytes() == saved and sorted(q.name for q in tmp_path.iterdir()) == ["state.safetensors"]
    with pytest.raises(KeyboardInterrupt):
        optimizer.load_state(path, progress=interrupt("read"))
    after = optimizer.state_dict()
    assert after["orthojit"]["steps_taken"] == stepped_state["orthojit"]["steps_taken"] == before["orthojit"]["steps_taken"] + 1
    assert all(torch.equal(after["state"][i][k], v) for i, s in stepped_state["state"].items() for k, v in s.items() if torch.is_tensor(v))
