"""orthojit.DistributedMuon's arguments and misuse, in one process (comm="local", no MPI): what
orthojit.Muon refuses is refused here too, and a step that cannot be taken changes nothing."""
import pytest

torch = pytest.importorskip("torch")
import orthojit  # noqa: E402


def pair_of_linears():
    torch.manual_seed(0)
    return torch.nn.Linear(6, 4), torch.nn.Linear(6, 4)


def same_random_gradients(seed, *modules):
    """The same fresh random gradient on the corresponding parameters of every module."""
    torch.manual_seed(seed)
    first, *others = modules
    for ps in zip(first.parameters(), *(m.parameters() for m in others)):
        ps[0].grad = torch.randn_like(ps[0])
        for p in ps[1:]:
            p.grad = ps[0].grad.clone()


def test_two_tensors_under_one_name_are_refused():
    encoder, decoder = pair_of_linears()
    # Each module's named_parameters yields "weight" and "bias": the second "weight" once took the
    # first's gradient, and the first was stepped with zeros.
    with pytest.raises(ValueError, match="two tensors are named 'weight'"):
        orthojit.DistributedMuon(list(encoder.named_parameters()) + list(decoder.named_parameters()), comm="local")
    with pytest.raises(ValueError, match="'again' is the tensor already given as 'weight'"):
        orthojit.DistributedMuon([("weight", encoder.weight), ("again", encoder.weight)], comm="local")
    with pytest.raises(ValueError, match="no trainable parameters"):
        orthojit.DistributedMuon([], comm="local")


@pytest.mark.parametrize("argument, value", [("average_gradients", "no"), ("gradients_reduced", "false"), ("offload", 1)])
def test_switches_must_be_bools(argument, value):
    encoder, _ = pair_of_linears()
    with pytest.raises(TypeError, match=f"{argument} must be True or False"):
        orthojit.DistributedMuon(encoder.named_parameters(), comm="local", **{argument: value})


@pytest.mark.parametrize("stage", [True, 2.0, "2", 4])
def test_stage_must_be_one_two_or_three(stage):
    encoder, _ = pair_of_linears()
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        orthojit.DistributedMuon(encoder.named_parameters(), comm="local", stage=stage)


def test_a_tensor_frozen_after_construction_fails_the_step_before_anything_changes():
    encoder, _ = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local")  # deepspeed: zeros for a missing grad
    encoder(torch.randn(3, 6)).sum().backward()
    optimizer.step()
    encoder.weight.requires_grad_(False)
    encoder.weight.grad = None
    encoder(torch.randn(3, 6)).sum().backward()
    before = {n: p.detach().clone() for n, p in encoder.named_parameters()}
    with pytest.raises(ValueError, match="'weight' was frozen"):
        optimizer.step()
    for name, p in encoder.named_parameters():
        assert torch.equal(p.detach(), before[name]), f"{name} changed"


def test_step_after_accumulate_does_not_read_grad():
    # accumulate() for every micro-batch, then step(): the sum of the micro-batches, whatever .grad
    # holds then (None under a preset that would refuse a missing gradient).
    torch.manual_seed(3)
    layer = torch.nn.Linear(6, 4)
    reference = torch.nn.Linear(6, 4)
    reference.load_state_dict(layer.state_dict())
    accumulating = orthojit.DistributedMuon(layer.named_parameters(), comm="local", preset="torch", settings={"muon.backend": "ref"})
    once = orthojit.DistributedMuon(reference.named_parameters(), comm="local", preset="torch", settings={"muon.backend": "ref"})
    batches = [torch.randn(3, 6) for _ in range(2)]
    for x in batches:
        layer.zero_grad(set_to_none=True)
        layer(x).sum().backward()
        accumulating.accumulate()
    layer.zero_grad(set_to_none=True)  # nothing in .grad: the torch preset would refuse a step that read it
    accumulating.step()
    reference.zero_grad(set_to_none=True)
    for x in batches:
        reference(x).sum().backward()  # .grad sums the micro-batches
    once.step()
    for (name, a), (_, b) in zip(layer.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=f"{name}")


def test_it_is_a_torch_optimizer_with_muons_groups():
    encoder, twin = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local", preset="keller", lr=0.01)
    reference = orthojit.Muon(twin.named_parameters(), preset="keller", lr=0.01)
    assert isinstance(optimizer, torch.optim.Optimizer)
    strip = lambda groups: [{k: v for k, v in g.items() if k != "params"} for g in groups]  # noqa: E731
    assert strip(optimizer.param_groups) == strip(reference.param_groups)
    encoder.weight.grad = torch.ones_like(encoder.weight)
    optimizer.zero_grad(set_to_none=True)
    assert encoder.weight.grad is None
    with pytest.raises(ValueError, match="cannot be added after construction"):
        optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3, 3))]})
    with pytest.raises(TypeError, match="cannot be pickled"):
        torch.save(optimizer, "/dev/null")


@pytest.mark.parametrize("key, value, message", [("lr", -1.0, "lr = -1.0"), ("momentum", 1.0, "momentum = 1.0"),
                                                 ("nesterov", False, "nesterov = False, but it was True"), ("lr", "0.1", "lr = '0.1'")])
def test_a_bad_group_value_fails_the_step_before_anything_changes(key, value, message):
    encoder, _ = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local", preset="keller")
    for p in encoder.parameters():
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in encoder.parameters()]
    optimizer.param_groups[0][key] = value  # the Muon group
    with pytest.raises(ValueError, match=message):
        optimizer.step()
    assert all(torch.equal(a, p) for a, p in zip(before, encoder.parameters()))
    assert optimizer.state_dict()["orthojit"]["steps_taken"] == 0


def test_a_checkpoint_that_does_not_fit_changes_nothing():
    encoder, other = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local", preset="keller")
    for p in encoder.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    before = optimizer.state_dict()
    wider = torch.nn.Linear(7, 4)
    foreign = orthojit.DistributedMuon(wider.named_parameters(), comm="local", preset="keller")
    with pytest.raises(ValueError, match=r"'weight.momentum_buffer' is torch.float32 \(4, 7\), expected torch.float32 \(4, 6\)"):
        optimizer.load_state_dict(foreign.state_dict())
    moonlight = orthojit.DistributedMuon(other.named_parameters(), comm="local", preset="moonlight")
    with pytest.raises(ValueError, match="momentum"):
        moonlight.load_state_dict(before)  # keller's momentum form differs from moonlight's
    after = optimizer.state_dict()
    assert all(torch.equal(after["state"][i][k], v) for i, s in before["state"].items() for k, v in s.items())
    assert after["param_groups"] == before["param_groups"]


def test_a_state_file_round_trips_and_a_bad_one_changes_nothing(tmp_path):
    encoder, other = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local", preset="keller")
    for p in encoder.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    optimizer.param_groups[0]["lr"] = 0.0125
    path = tmp_path / "state.safetensors"
    optimizer.save_state(path)
    twin = orthojit.DistributedMuon(other.named_parameters(), comm="local", preset="keller")
    twin.load_state(path)
    mine, theirs = optimizer.state_dict(), twin.state_dict()
    assert all(torch.equal(theirs["state"][i][k], v) for i, s in mine["state"].items() for k, v in s.items())
    assert theirs["param_groups"] == mine["param_groups"] and twin.steps_taken == 1
    # What a state file cannot hold is named; nothing is written.
    optimizer.param_groups[0]["schedule"] = object()
    with pytest.raises(ValueError, match="'schedule' of group 0 is a object"):
        optimizer.save_state(tmp_path / "other.safetensors")
    assert not (tmp_path / "other.safetensors").exists()
    del optimizer.param_groups[0]["schedule"]
    # Not a state file, another model's, a corrupt one: refused, nothing changed.
    (tmp_path / "text.safetensors").write_bytes(b"hello")
    with pytest.raises(OSError, match="not a valid safetensors file"):
        twin.load_state(tmp_path / "text.safetensors")
    wider = orthojit.DistributedMuon(torch.nn.Linear(7, 4).named_parameters(), comm="local", preset="keller")
    wider.save_state(tmp_path / "wider.safetensors")
    with pytest.raises(RuntimeError, match="does not match"):
        twin.load_state(tmp_path / "wider.safetensors")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="the data is corrupt"):
        twin.load_state(path)
    after = twin.state_dict()
    assert all(torch.equal(after["state"][i][k], v) for i, s in theirs["state"].items() for k, v in s.items())
    assert after["param_groups"] == theirs["param_groups"]


def test_matrix_options_split_as_in_muon():
    # A fused QKV projection split into q, k, v and heads: DistributedMuon (one process) steps it
    # bit-identically to orthojit.Muon given the same options; without them the result differs.
    torch.manual_seed(3)
    qkv, twin, plain = torch.nn.Linear(5, 12), torch.nn.Linear(5, 12), torch.nn.Linear(5, 12)
    twin.load_state_dict(qkv.state_dict())
    plain.load_state_dict(qkv.state_dict())
    options = {"weight": {"row_splits": [4, 4, 4], "head_rows": 2}}
    settings = {"muon.backend": "ref", "muon.precision": "f32"}
    distributed = orthojit.DistributedMuon(qkv.named_parameters(), comm="local", preset="keller", settings=settings, matrix_options=options)
    reference = orthojit.Muon(twin.named_parameters(), preset="keller", settings=settings, matrix_options=options)
    unsplit = orthojit.DistributedMuon(plain.named_parameters(), comm="local", preset="keller", settings=settings)
    for module in (qkv, twin, plain):
        torch.manual_seed(4)
        for p in module.parameters():
            p.grad = torch.randn_like(p)
    distributed.step()
    reference.step()
    unsplit.step()
    assert torch.equal(qkv.weight, twin.weight)
    assert not torch.equal(plain.weight, twin.weight)
    with pytest.raises(ValueError, match="'nope', which is not a trainable parameter"):
        orthojit.DistributedMuon(qkv.named_parameters(), comm="local", matrix_options={"nope": {"head_rows": 2}})
    with pytest.raises(ValueError, match="unknown matrix options"):
        orthojit.DistributedMuon(qkv.named_parameters(), comm="local", matrix_options={"weight": {"heads": 2}})
    with pytest.raises(ValueError, match="tagged AdamW but has matrix options"):
        orthojit.DistributedMuon(qkv.named_parameters(), comm="local", matrix_options={"bias": {"head_rows": 2}})


def test_max_grad_norm_clips_the_reduced_gradient():
    # One process: the reduced gradient is the gradient. The step must be orthojit.Muon's on the
    # gradient divided by c = fl32((|g| + 1e-6) / max), the norm reported; a bad max is refused.
    torch.manual_seed(5)
    net, twin = torch.nn.Linear(6, 4), torch.nn.Linear(6, 4)
    twin.load_state_dict(net.state_dict())
    settings = {"muon.backend": "ref", "muon.precision": "f32"}
    distributed = orthojit.DistributedMuon(net.named_parameters(), comm="local", preset="keller", settings=settings, max_grad_norm=0.5)
    reference = orthojit.Muon(twin.named_parameters(), preset="keller", settings=settings)
    for step in range(2):
        same_random_gradients(10 + step, net, twin)
        report = distributed.step()
        norm = torch.cat([q.grad.double().reshape(-1) for q in twin.parameters()]).norm().item()
        assert abs(report["gradient_norm"] - norm) <= 1e-12 * norm
        divisor = torch.tensor((report["gradient_norm"] + 1e-6) / 0.5, dtype=torch.float32)
        assert divisor.item() > 1
        for q in twin.parameters():
            q.grad.div_(divisor)
        reference.step()
        for p, q in zip(net.parameters(), twin.parameters()):
            assert torch.equal(p, q)
    for bad in (0, -1.0, float("inf"), "1", True):
        with pytest.raises(ValueError, match="max_grad_norm must be a finite number > 0"):
            orthojit.DistributedMuon(net.named_parameters(), comm="local", max_grad_norm=bad)


def test_from_deepspeed_config_takes_stage_offload_clipping_and_the_optimizer_params():
    config = {"train_batch_size": 8, "gradient_clipping": 0.25,
              "zero_optimization": {"stage": 3, "reduce_scatter": False},
              "optimizer": {"type": "muon", "params": {"lr": 0.01, "muon_lr": 0.03, "weight_decay": 0.02, "betas": [0.8, 0.9],
                                                        "orthojit_backend": "ref", "not_a_key": 1}}}
    torch.manual_seed(7)
    net, twin = torch.nn.Linear(6, 4), torch.nn.Linear(6, 4)
    twin.load_state_dict(net.state_dict())
    with pytest.warns(UserWarning, match="ignored unknown key optimizer.params.not_a_key"):
        configured = orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), config, "local", mode="balanced")
    by_hand = orthojit.DistributedMuon(twin.named_parameters(), "local", stage=3, mode="balanced", muon_lr=0.03, adam_lr=0.01, weight_decay=0.02,
                                       betas=(0.8, 0.9), backend="ref", max_grad_norm=0.25)
    assert configured._layout == {"stage": 3, "mode": "balanced"}
    assert [g["lr"] for g in configured.param_groups] == [0.03, 0.01]
    for step in range(2):
        same_random_gradients(30 + step, net, twin)
        report = configured.step()
        by_hand.step()
        configured.gather_parameters()
        by_hand.gather_parameters()
        assert report["gradient_norm"] > 0.25  # clipped
        for p, q in zip(net.parameters(), twin.parameters()):
            assert torch.equal(p, q)
    with pytest.raises(ValueError, match="stage 0 is plain data parallelism"):
        orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), {"optimizer": {"type": "muon"}}, "local")
    with pytest.raises(TypeError, match="takes stage from the config"):
        orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), config, "local", stage=1)
    with pytest.raises(ValueError, match="unknown"):
        orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), config, "local", strict=True)


def test_bucket_size_sets_the_staging_buffer_and_not_the_result():
    # One process: the bucket holds min(bucket_size, the partition) elements, so the optimizer's
    # memory differs from the default's by 4 bytes per element it no longer stages; the rounds of
    # one element each give the same parameters bit for bit. The DeepSpeed config's
    # reduce_bucket_size sets it too; a bad size is refused.
    torch.manual_seed(11)
    net, twin = torch.nn.Linear(9, 5), torch.nn.Linear(9, 5)
    twin.load_state_dict(net.state_dict())
    settings = {"muon.backend": "ref", "muon.precision": "f32"}
    whole = orthojit.DistributedMuon(net.named_parameters(), comm="local", stage=2, settings=settings)
    rounds = orthojit.DistributedMuon(twin.named_parameters(), comm="local", stage=2, settings=settings, bucket_size=1)
    padded = whole.plan()["padded_elements"]
    assert padded == 9 * 5 + 5
    assert whole.memory_bytes() - rounds.memory_bytes() == 4 * (padded - 1)
    for step in range(2):
        same_random_gradients(50 + step, net, twin)
        whole.step()
        rounds.step()
        for p, q in zip(net.parameters(), twin.parameters()):
            assert torch.equal(p, q)
    config = {"optimizer": {"type": "muon", "params": {}}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 7}}
    configured = orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), config, "local")
    assert whole.memory_bytes() - configured.memory_bytes() == 4 * (padded - 7)
    with pytest.raises(TypeError, match="takes bucket_size from the config"):
        orthojit.DistributedMuon.from_deepspeed_config(net.named_parameters(), config, "local", bucket_size=3)
    for bad in (0, -5, 2.5, "8", True):
        with pytest.raises(ValueError, match="bucket_size must be a whole number of elements >= 1"):
            orthojit.DistributedMuon(net.named_parameters(), comm="local", bucket_size=bad)


def test_a_missing_gradient_under_skip_is_refused_with_nothing_changed():
    # moonlight's missing_grad = skip: a parameter without .grad is an error, decided by the runtime
    # with the other ranks (here one), and nothing moves; the next step with every gradient works.
    torch.manual_seed(13)
    net = torch.nn.Linear(6, 4)
    distributed = orthojit.DistributedMuon(net.named_parameters(), comm="local", preset="moonlight", settings={"muon.backend": "ref"})
    same_random_gradients(60, net)
    net.bias.grad = None
    before = [p.detach().clone() for p in net.parameters()]
    for call in (distributed.accumulate, distributed.step):
        with pytest.raises(ValueError, match="parameter 'bias' has no gradient"):
            call()
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), before))
    same_random_gradients(61, net)
    assert not distributed.step()["skipped"]
    assert not torch.equal(net.weight, before[0])


def test_channels_last_filters_step_as_their_contiguous_twins(tmp_path):
    # A vision model after model.to(memory_format=torch.channels_last): its filters are stepped as
    # contiguous copies, so every step is the contiguous model's, bit for bit; the filters stay
    # channels_last; an edit of a filter between steps (a trainer clamping it) is what the next
    # step starts from; the state and its file are the contiguous model's.
    def net():
        torch.manual_seed(4)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.Conv2d(6, 4, (2, 3)), torch.nn.Flatten(), torch.nn.Linear(4, 2))

    last, plain = net().to(memory_format=torch.channels_last), net()
    assert last[0].weight.is_contiguous(memory_format=torch.channels_last) and not last[0].weight.is_contiguous()
    make = lambda m: orthojit.DistributedMuon(m.named_parameters(), comm="local", preset="keller", stage=3)  # noqa: E731
    a, b = make(last), make(plain)
    for step in range(3):
        same_random_gradients(10 + step, plain, last)
        if step == 2:
            with torch.no_grad():
                for p, q in zip(last.parameters(), plain.parameters()):
                    p.mul_(0.5)
                    q.mul_(0.5)
        assert not a.step()["skipped"] and not b.step()["skipped"]
        a.gather_parameters()
        b.gather_parameters()
        for (name, p), q in zip(last.named_parameters(), plain.parameters()):
            assert torch.equal(p, q), f"{name} after step {step}"
    assert last[0].weight.is_contiguous(memory_format=torch.channels_last) and last[1].weight.is_contiguous(memory_format=torch.channels_last)
    mine, theirs = a.state_dict(), b.state_dict()
    assert all(torch.equal(theirs["state"][i][k], v) for i, s in mine["state"].items() for k, v in s.items())
    a.save_state(tmp_path / "last.safetensors")
    b.save_state(tmp_path / "plain.safetensors")
    assert (tmp_path / "last.safetensors").read_bytes() == (tmp_path / "plain.safetensors").read_bytes()
    # A refused step (a non-finite gradient) leaves the filters as they were.
    before = [p.detach().clone() for p in last.parameters()]
    last[0].weight.grad[0, 0, 0, 0] = float("nan")
    assert a.step()["skipped"]
    assert all(torch.equal(p, q) for p, q in zip(last.parameters(), before))


@pytest.mark.parametrize("replace, message", [
    (lambda m: m.to(torch.bfloat16), r"dtype torch.float32 -> torch.bfloat16"),
    (lambda m: setattr(m.weight, "data", m.weight.data.double()), r"dtype torch.float32 -> torch.float64"),
    (lambda m: setattr(m.weight, "data", m.weight.data[:2].clone()), r"shape \(4, 6\) -> \(2, 6\)"),
    (lambda m: setattr(m.weight, "data", m.weight.data.clone()), r"its storage"),
])
def test_a_parameter_whose_storage_was_replaced_is_refused_before_the_runtime_writes_it(replace, message):
    # The runtime addresses the memory the parameters had at construction: a step after
    # model.to(dtype) or p.data = ... wrote into freed memory (a heap corruption), or updated a
    # tensor the model no longer used. Each call that reads or writes parameters refuses it.
    encoder, _ = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local")
    replace(encoder)
    for p in encoder.parameters():
        p.grad = torch.ones_like(p)
    before = {n: p.detach().clone() for n, p in encoder.named_parameters()}
    for call in (optimizer.step, optimizer.accumulate, optimizer.gather_parameters,
                 lambda: optimizer.qk_clip("weight", "weight", 2, [1e9, 1e9], 1.0)):
        with pytest.raises(ValueError, match=message):
            call()
    for name, p in encoder.named_parameters():
        assert torch.equal(p.detach(), before[name]), f"{name} changed"
    assert optimizer.steps_taken == 0


def test_a_gradient_of_another_shape_is_refused_before_it_is_read():
    # The runtime reads as many elements as the parameter has: a shorter gradient was read past its
    # end, a longer one truncated, without a word.
    encoder, _ = pair_of_linears()
    optimizer = orthojit.DistributedMuon(encoder.named_parameters(), comm="local")
    same_random_gradients(1, encoder)
    encoder.bias.grad.data = torch.randn(2)
    with pytest.raises(ValueError, match=r"the gradient of 'bias' has shape \(2,\), the parameter \(4,\)"):
        optimizer.step()
    with pytest.raises(ValueError, match=r"the gradient of 'bias' has shape \(2,\)"):
        optimizer.accumulate()
    assert optimizer.steps_taken == 0


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(use_muon={"weight": "no"}), TypeError, r"use_muon\['weight'\] = 'no'; expected True or False"),  # bool("no") is True
    (dict(use_muon={"wieght": False}), ValueError, r"use_muon names parameters it was not given: \['wieght'\]"),
    (dict(lr="0.1"), TypeError, r"muon.lr = '0.1'; expected a number"),  # converted to 0.1 where orthojit.Muon refuses it
    (dict(momentum=True), TypeError, r"muon.momentum = True"),
    (dict(nesterov="no"), TypeError, r"nesterov = 'no'; expected True or False"),
    (dict(betas=0.9), ValueError, r"betas must be a pair of numbers"),
])
def test_arguments_of_the_wrong_type_are_refused_not_converted(kwargs, error, message):
    encoder, _ = pair_of_linears()
    with pytest.raises(error, match=message):
        orthojit.DistributedMuon(encoder.named_parameters(), comm="local", **kwargs)


def test_a_parameter_that_is_not_a_tensor_is_named():
    with pytest.raises(TypeError, match=r"parameter 'w' is a ndarray, not a torch.Tensor"):
        orthojit.DistributedMuon([("w", torch.zeros(4, 4).numpy())], comm="local")
