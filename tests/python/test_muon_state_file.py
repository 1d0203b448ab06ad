"""orthojit.Muon's state file, tensor by tensor (save_state / load_state): a load checks the
names and shapes before it reads a tensor, and the whole file's checksum before the state
changes, and a read or write that fails midway leaves the optimizer, and the file at the path,
as they were."""
import pytest

torch = pytest.importorskip("torch")
import orthojit  # noqa: E402
from orthojit import _orthojit  # noqa: E402

EXACT = {"muon.backend": "ref", "muon.precision": "f64"}
BINDING_READER, BINDING_WRITER = _orthojit.StateFileReader, _orthojit.StateFileWriter


def conv_and_linear(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.Flatten(), torch.nn.Linear(6, 4))


def stepped(model, steps, seed):
    optimizer = orthojit.Muon(model.named_parameters(), preset="keller", settings=EXACT)
    torch.manual_seed(seed)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
    return optimizer


def snapshot(optimizer):
    saved = optimizer.state_dict()
    return {i: {k: v.clone() for k, v in s.items()} for i, s in saved["state"].items()}, saved["param_groups"], optimizer.steps_taken


def assert_same(optimizer, before):
    state, groups, steps = snapshot(optimizer)
    assert state.keys() == before[0].keys()
    assert all(torch.equal(state[i][k], v) for i, s in before[0].items() for k, v in s.items())
    assert groups == before[1] and steps == before[2]


class RecordingReader:
    """The binding's reader, recording the order of checksum and reads, failing the n-th read."""

    log = []
    fail_read = None

    def __init__(self, path, progress=None):
        self.inner = BINDING_READER(path, progress)

    @property
    def metadata(self):
        return self.inner.metadata

    @property
    def tensors(self):
        return self.inner.tensors

    def verify_checksum(self):
        RecordingReader.log.append("checksum")
        self.inner.verify_checksum()

    def read(self, name, address, size):
        reads = sum(1 for entry in RecordingReader.log if entry != "checksum")
        if reads == RecordingReader.fail_read:
            raise OSError("the planted read failure")
        RecordingReader.log.append(name)
        self.inner.read(name, address, size)


@pytest.fixture
def recording_reader(monkeypatch):
    RecordingReader.log, RecordingReader.fail_read = [], None
    monkeypatch.setattr(_orthojit, "StateFileReader", RecordingReader)
    return RecordingReader


def test_a_channels_last_model_resumes_bit_exactly_from_its_file(tmp_path, recording_reader):
    model = conv_and_linear(1).to(memory_format=torch.channels_last)
    optimizer = stepped(model, 2, seed=5)
    path = tmp_path / "state.safetensors"
    optimizer.save_state(path)
    twin = conv_and_linear(1).to(memory_format=torch.channels_last)
    twin.load_state_dict(model.state_dict())
    resumed = orthojit.Muon(twin.named_parameters(), preset="keller", settings=EXACT)
    resumed.load_state(path)
    # Every tensor is read once, then the whole file's checksum is checked, before the state changes.
    assert recording_reader.log[-1] == "checksum" and len(recording_reader.log) == 1 + len(_orthojit.read_state_header(str(path))[1])
    filter_state = resumed.state[twin[0].weight]["momentum_buffer"]
    assert filter_state.is_contiguous(memory_format=torch.channels_last) and not filter_state.is_contiguous()
    assert torch.equal(filter_state, optimizer.state[model[0].weight]["momentum_buffer"])
    for _ in range(2):
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        optimizer.step()
        resumed.step()
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters()))


def test_a_corrupt_file_is_refused_and_changes_nothing(tmp_path, recording_reader):
    path = tmp_path / "state.safetensors"
    stepped(conv_and_linear(1), 1, seed=5).save_state(path)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x40
    path.write_bytes(bytes(data))
    target = stepped(conv_and_linear(2), 3, seed=6)
    before = snapshot(target)
    with pytest.raises(OSError, match="the data is corrupt"):
        target.load_state(path)
    assert recording_reader.log[-1] == "checksum", "the checksum was not checked after the reads"
    assert_same(target, before)


def test_a_file_of_other_shapes_is_refused_before_the_checksum(tmp_path, recording_reader):
    path = tmp_path / "state.safetensors"
    torch.manual_seed(3)
    wider = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.Flatten(), torch.nn.Linear(6, 5))
    stepped(wider, 1, seed=5).save_state(path)
    target = stepped(conv_and_linear(2), 1, seed=6)
    before = snapshot(target)
    with pytest.raises(ValueError, match=r"'2.weight.momentum_buffer' is torch.float32 \(5, 6\), expected torch.float32 \(4, 6\)"):
        target.load_state(path)
    assert recording_reader.log == []
    assert_same(target, before)


def test_a_read_failing_midway_changes_nothing(tmp_path, recording_reader):
    path = tmp_path / "state.safetensors"
    stepped(conv_and_linear(1), 2, seed=5).save_state(path)
    target = stepped(conv_and_linear(2), 1, seed=6)
    before = snapshot(target)
    recording_reader.fail_read = 2  # the third tensor
    with pytest.raises(OSError, match="the planted read failure"):
        target.load_state(path)
    assert_same(target, before)
    recording_reader.fail_read = None
    target.load_state(path)
    assert target.steps_taken == 2


class FailingWriter:
    """The binding's writer, failing the n-th tensor."""

    fail_write = 0

    def __init__(self, path, tensors, metadata, progress=None):
        self.inner = BINDING_WRITER(path, tensors, metadata, progress)
        self.writes = 0

    def write(self, name, address, size):
        if self.writes == FailingWriter.fail_write:
            raise OSError("the planted write failure")
        self.writes += 1
        self.inner.write(name, address, size)

    def commit(self):
        self.inner.commit()


def test_a_save_failing_midway_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "state.safetensors"
    first = stepped(conv_and_linear(1), 1, seed=5)
    first.save_state(path)
    saved = path.read_bytes()
    later = stepped(conv_and_linear(2), 2, seed=6)
    FailingWriter.fail_write = 3
    monkeypatch.setattr(_orthojit, "StateFileWriter", FailingWriter)
    with pytest.raises(OSError, match="the planted write failure"):
        later.save_state(path)
    assert path.read_bytes() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.safetensors"], "a temporary file was left behind"


def test_the_writer_refuses_a_missing_tensor_and_a_wrong_size(tmp_path):
    path = tmp_path / "state.safetensors"
    values = torch.arange(6, dtype=torch.float32)
    writer = _orthojit.StateFileWriter(str(path), [("a", "F32", [6]), ("b", "F32", [2])], {})
    with pytest.raises(ValueError, match="'a' has 24 bytes, the source 20"):
        writer.write("a", values.data_ptr(), 20)
    with pytest.raises(ValueError, match="declares no tensor 'c'"):
        writer.write("c", values.data_ptr(), 8)
    writer.write("a", values.data_ptr(), 24)
    with pytest.raises(OSError, match='tensor "b" was never given'):
        writer.commit()
    assert not path.exists()


def test_the_checkpoint_benchmark_runs_on_a_small_model(tmp_path):
    # bench/muon_checkpoint_memory.py, so that it keeps running: both loads, one repeat.
    import os
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "muon_checkpoint_memory.py")
    done = subprocess.run([sys.executable, script, "--embedding-rows", "64", "--muon-layers", "1", "--repeats", "1",
                           "--path", str(tmp_path / "bench.safetensors")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "load, whole state" in done.stdout and "load_state (streamed)" in done.stdout, done.stdout
    assert not (tmp_path / "bench.safetensors").exists()


def test_inspect_state_describes_a_saved_state_and_finds_a_corrupt_one(tmp_path):
    model = conv_and_linear(1)
    optimizer = stepped(model, 3, seed=5)
    path = tmp_path / "state.safetensors"
    optimizer.save_state(path)
    summary = orthojit.inspect_state(path)
    groups = {group["name"]: group["param_names"] for group in optimizer.param_groups}
    assert [m["name"] for m in summary["muon"]] == groups["muon-params"]
    assert [a["name"] for a in summary["adam"]] == groups["adam-params"]
    assert [m["elements"] for m in summary["muon"]] == [p.numel() for p in optimizer.param_groups[0]["params"]]
    assert summary["adam_steps"] == [3, 3] and summary["metadata"]["orthojit.steps_taken"] == "3"
    assert summary["metadata"]["orthojit.preset"] == "keller" and "orthojit.python.param_groups" in summary["metadata"]
    assert summary["checksum_verified"] and summary["unknown"] == []
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="the data is corrupt"):
        orthojit.inspect_state(path)
    assert orthojit.inspect_state(path, verify=False)["checksum_verified"] is False
    with pytest.raises(TypeError, match="verify must be True or False"):
        orthojit.inspect_state(path, verify="yes")
