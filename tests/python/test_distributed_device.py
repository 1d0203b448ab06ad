"""orthojit.DistributedMuon in one process (comm="local", no MPI): bit-identical to orthojit.Muon
for every ZeRO stage and mode, on CPU tensors (always) and on CUDA tensors over NCCL (where a GPU
is present: scripts/gpu-check runs these). On one rank the reductions are copies, so a difference
is the distributed step's own: its accumulation, partition bookkeeping, Muon grouping, AdamW
slices and the all-gather's conversions, all of which run as generated kernels on CUDA memory."""
import pytest

torch = pytest.importorskip("torch")
import orthojit  # noqa: E402

# A keller preset on the given backend; weight decay so that the update's every term shows. The
# host backends iterate in f32; the cuda backend stores bf16 (it has no f32 storage and refuses it).
def settings(backend):
    return {"muon.backend": backend, "muon.precision": "bf16" if backend == "cuda" else "f32", "muon.weight_decay": 0.01,
            "adam.weight_decay": 0.01}


# balanced mode against the fused single-rank step, per parameter and step: the relative distance
# of the two updates, ||da - db||_F / ||db||_F. Each update is -lr*scale*O - lr*wd*p, the second
# term the same on both sides, so this is the relative distance of the two orthogonalized
# momenta: two bf16 iterations with the same rounding points but other accumulation orders (one
# an orthogonalizer call, the other the fused Muon step) stay within the 3e-2 that
# tests/cpu_backend_test.cpp argues for 16-bit storage. One element of O lost or doubled in a 13x6
# matrix is about 1/sqrt(78) = 0.11 of its norm: well above.
BALANCED_BF16_UPDATE_TOLERANCE = 3e-2


def model(seed, device, dtype):
    torch.manual_seed(seed)
    # Awkward sizes so the partition cuts through matrices; an embedding and biases for AdamW; a
    # 3-D stack of matrices (Keller orthogonalizes it as a batch).
    layers = torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(11, 6),
        "hidden": torch.nn.Linear(6, 13),
        "out": torch.nn.Linear(13, 7),
    })
    layers.register_parameter("experts", torch.nn.Parameter(torch.randn(3, 5, 9) * 0.2))
    return layers.to(device=device, dtype=dtype)


def run_both(device, dtype, backend, stage, mode, engine):
    distributed_model, reference_model = model(1, device, dtype), model(1, device, dtype)
    distributed = orthojit.DistributedMuon(distributed_model.named_parameters(), "local", stage=stage, mode=mode, preset="keller",
                                           settings=settings(backend), engine=engine)
    reference = orthojit.Muon(reference_model.named_parameters(), preset="keller", settings=settings(backend))
    mismatches = []
    for step in range(3):
        torch.manual_seed(100 + step)
        gradients = {name: torch.randn_like(p) for name, p in reference_model.named_parameters()}
        missing = {"hidden.weight", "out.bias"} if step == 1 else set()  # keller: stepped with zeros
        for m in (reference_model, distributed_model):
            for name, p in m.named_parameters():
                p.grad = None if name in missing else gradients[name].clone()
        before = [(a.detach().float().clone(), b.detach().float().clone())
                  for (_, a), (_, b) in zip(distributed_model.named_parameters(), reference_model.named_parameters())]
        report = distributed.step()
        assert not report["skipped"], report["reason"]
        if stage == 3:
            distributed.gather_parameters()
        reference.step()
        for ((name, a), (_, b)), (a0, b0) in zip(zip(distributed_model.named_parameters(), reference_model.named_parameters()), before):
            if not torch.equal(a.detach(), b.detach()):
                da, db = a.detach().float() - a0, b.detach().float() - b0
                relative = ((da - db).norm() / db.norm().clamp_min(1e-30)).item()
                mismatches.append(f"step {step}: {name} differs by up to {(a.float() - b.float()).abs().max().item():.3g}; "
                                  f"relative update difference {relative:.3g}")
    return mismatches


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("mode", ["deepspeed", "balanced"])
def test_one_process_distributed_muon_is_bit_identical_to_muon_on_cpu_tensors(stage, mode):
    assert run_both("cpu", torch.float32, "ref", stage, mode, "mpi") == []


def test_cuda_tensors_are_refused_without_nccl_and_host_engines_are_named():
    linear = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="engine must be"):
        orthojit.DistributedMuon(linear.named_parameters(), "local", engine="gloo")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device in this process's torch: CUDA tensors cannot be made here")
    linear = linear.cuda()
    with pytest.raises(ValueError, match="engine='nccl'"):
        orthojit.DistributedMuon(linear.named_parameters(), "local", engine="mpi")


def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device in this process's torch (torch.cuda.is_available() is False)")
    if "cuda" not in orthojit.info().get("backends", []):
        pytest.skip("this orthojit build or machine has no cuda backend: " + str(orthojit.info().get("cuda", "")))


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_distributed_muon_on_cuda_tensors_over_nccl_is_bit_identical_to_muon(stage, dtype):
    _cuda_or_skip()
    # deepspeed mode runs the compiled Muon steps of orthojit.Muon on CUDA tensors: the same bits.
    assert run_both("cuda", dtype, "cuda", stage, "deepspeed", "nccl") == []


@pytest.mark.parametrize("stage", [1, 3])
def test_balanced_mode_on_cuda_tensors_agrees_with_muon_to_bf16_rounding(stage):
    _cuda_or_skip()
    # balanced mode splits the momentum from the iteration (momentum kernel, orthogonalizer,
    # update kernel), where the single-rank step fuses them: the same formulas, the bf16
    # iteration's roundings in other places (BALANCED_BF16_UPDATE_TOLERANCE).
    mismatches = run_both("cuda", torch.float32, "cuda", stage, "balanced", "nccl")
    for line in mismatches:
        assert float(line.rsplit(" ", 1)[1]) < BALANCED_BF16_UPDATE_TOLERANCE, line


def test_distributed_muon_takes_muons_constructor_vocabulary_with_the_same_meaning():
    # The same arguments to both: lr for both groups, weight decay, momentum, betas, eps, and the
    # exact f64 iteration through settings. One process: the parameters agree bit for bit.
    arguments = dict(lr=0.013, weight_decay=0.07, momentum=0.9, nesterov=False, betas=(0.85, 0.97), eps=1e-7,
                     settings={"muon.precision": "f64"}, backend="ref")
    a, b = model(3, "cpu", torch.float32), model(3, "cpu", torch.float32)
    distributed = orthojit.DistributedMuon(a.named_parameters(), "local", stage=2, preset="keller", **arguments)
    single = orthojit.Muon(b.named_parameters(), "keller", **arguments)
    for step in range(2):
        torch.manual_seed(50 + step)
        for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        distributed.step()
        single.step()
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p.detach(), q.detach()), name
    # The explicit arguments win over settings, as in orthojit.Muon; and a bad pair is named.
    with pytest.raises(ValueError, match="betas must be a pair"):
        orthojit.DistributedMuon(a.named_parameters(), "local", betas=(0.9,))


def _twin_models(seed, device):
    """(backend, engine, two equal f32 models) for a comparison on `device` (skipped without CUDA)."""
    if device == "cuda":
        _cuda_or_skip()
    backend, engine = ("cuda", "nccl") if device == "cuda" else ("ref", "mpi")
    return backend, engine, model(seed, device, torch.float32), model(seed, device, torch.float32)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_checkpoints_move_between_distributed_muon_and_muon_bit_for_bit(device):
    # The state is gathered from (and loaded into) the step's memory: device memory for CUDA
    # tensors. deepspeed mode is bit-identical to orthojit.Muon on both devices (run_both above),
    # so its state_dict must be Muon's, tensor for tensor; a DistributedMuon of another stage and
    # mode loaded with Muon's state continues bit-identically.
    backend, engine, a, b = _twin_models(4, device)
    distributed = orthojit.DistributedMuon(a.named_parameters(), "local", stage=2, preset="keller", settings=settings(backend), engine=engine)
    single = orthojit.Muon(b.named_parameters(), preset="keller", settings=settings(backend))

    def step_both(first, count, x, y, one, other):
        for step in range(first, first + count):
            torch.manual_seed(70 + step)
            for (_, p), (_, q) in zip(x.named_parameters(), y.named_parameters()):
                p.grad = torch.randn_like(p)
                q.grad = p.grad.clone()
            one.step()
            if getattr(one, "_layout", {}).get("stage") == 3:
                one.gather_parameters()
            other.step()
        for (name, p), (_, q) in zip(x.named_parameters(), y.named_parameters()):
            assert torch.equal(p.detach(), q.detach()), f"{name} after step {first + count - 1}"

    step_both(0, 2, a, b, distributed, single)
    saved, expected = distributed.state_dict(), single.state_dict()
    for index, values in expected["state"].items():
        for key, value in values.items():
            assert torch.equal(saved["state"][index][key], value.cpu()), f"state[{index}][{key}]"
    c = model(4, device, torch.float32)
    c.load_state_dict(b.state_dict())
    resumed = orthojit.DistributedMuon(c.named_parameters(), "local", stage=3, mode="deepspeed", preset="keller", settings=settings(backend),
                                       engine=engine)
    resumed.load_state_dict(expected)
    step_both(2, 2, c, b, resumed, single)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gradient_clipping_on_the_steps_memory_matches_muon_on_the_divided_gradient(device):
    # max_grad_norm's sum of squares runs where the gradients are (CUDA: a generated kernel with a
    # partial per thread): the reported norm is the gradient's f64 norm, and the step is
    # orthojit.Muon's on the gradient divided by c = fl32((|g| + 1e-6) / max), bit for bit
    # (deepspeed mode runs Muon's compiled steps on both devices).
    backend, engine, a, b = _twin_models(6, device)
    distributed = orthojit.DistributedMuon(a.named_parameters(), "local", stage=2, preset="keller", settings=settings(backend), engine=engine,
                                           max_grad_norm=1.0)
    single = orthojit.Muon(b.named_parameters(), preset="keller", settings=settings(backend))
    for step in range(2):
        torch.manual_seed(90 + step)
        for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        report = distributed.step()
        norm = torch.cat([q.grad.double().reshape(-1) for q in b.parameters()]).norm().item()
        assert abs(report["gradient_norm"] - norm) <= 1e-12 * norm
        divisor = torch.tensor((report["gradient_norm"] + 1e-6) / 1.0, dtype=torch.float32, device=device)
        for q in b.parameters():
            q.grad.div_(divisor)
        single.step()
        for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
            assert torch.equal(p.detach(), q.detach()), f"{name} after step {step}"
