"""orthojit.Muon keeps torch's optimizer contract where a step or a call fails: bad hyperparameters
are refused where torch refuses them (construction, add_param_group) and again before a step
changes anything; a refused add_param_group adds nothing; frozen parameters are never touched;
what cannot be copied says so where the copy is made. Each test compares every parameter and
state tensor before and after, so one tensor changed by a half-done step fails it."""

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

import orthojit  # noqa: E402


def snapshot(model, optimizer):
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()} for p, s in optimizer.state.items()}
    return params, state, optimizer.steps_taken


def assert_unchanged(model, optimizer, before):
    params, state, steps = before
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), params[name]), f"{name} changed"
    for p, s in optimizer.state.items():
        for key, value in s.items():
            if isinstance(value, torch.Tensor):
                assert id(p) in state and torch.equal(value, state[id(p)][key]), f"state {key} changed"
    assert optimizer.steps_taken == steps


def model_and_gradients(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.Linear(12, 6))
    model(torch.randn(16, 8)).square().mean().backward()
    return model


def test_frozen_parameters_are_never_touched():
    model = model_and_gradients()
    optimizer = orthojit.Muon(model.named_parameters())  # deepspeed: a missing gradient counts as zeros
    optimizer.step()
    model[0].requires_grad_(False)
    frozen = {n: p.detach().clone() for n, p in model[0].named_parameters()}
    trained = model[1].weight.detach().clone()
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        model(torch.randn(16, 8)).square().mean().backward()
        optimizer.step()
    for name, p in model[0].named_parameters():
        assert torch.equal(p.detach(), frozen[name]), f"frozen {name} moved"
    assert not torch.equal(model[1].weight.detach(), trained)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-1e-3), "lr = -0.001"), (dict(lr=float("nan")), "lr = nan"), (dict(momentum=1.0), "momentum = 1.0"),
    (dict(betas=(0.9,)), "betas = (0.9,)"), (dict(eps=0.0), "eps = 0.0"), (dict(nesterov="false"), "nesterov = 'false'"),
    (dict(weight_decay="0.1"), "weight_decay = '0.1'")])
def test_bad_hyperparameters_are_refused_at_construction(kwargs, message):
    model = model_and_gradients()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        orthojit.Muon(model.named_parameters(), preset="keller", **kwargs)


def test_a_bad_value_edited_into_param_groups_fails_the_step_before_anything_changes():
    model = model_and_gradients()
    optimizer = orthojit.Muon(model.named_parameters(), preset="keller")
    optimizer.step()
    model(torch.randn(16, 8)).square().mean().backward()
    before = snapshot(model, optimizer)
    adam_group = next(g for g in optimizer.param_groups if not g["use_muon"])  # after the Muon group
    adam_group["lr"] = -1e-3
    with pytest.raises(ValueError, match="AdamW.*lr = -0.001"):
        optimizer.step()
    assert_unchanged(model, optimizer, before)
    adam_group["lr"] = 3e-4
    optimizer.step()  # fixed: the step runs once, as if the failure had not been
    assert optimizer.steps_taken == before[2] + 1


def test_a_parameter_made_non_contiguous_fails_the_step_before_anything_changes():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Conv2d(4, 8, 3), torch.nn.Linear(6, 5))
    optimizer = orthojit.Muon(model.named_parameters())
    model.to(memory_format=torch.channels_last)  # the filter: channels_last, which is stepped as it is
    model[2].weight.data = model[2].weight.data.t().contiguous().t()  # a transposed layout, which is not
    model[1](torch.randn(2, 4, 5, 5)).sum().backward()
    model[0](torch.randn(2, 4)).sum().backward()
    model[2](torch.randn(3, 6)).sum().backward()
    before = snapshot(model, optimizer)
    with pytest.raises(ValueError, match="'2.weight' is not a contiguous dense tensor"):
        optimizer.step()
    assert_unchanged(model, optimizer, before)
    model[2].weight.data = model[2].weight.data.contiguous()
    optimizer.step()
    assert model[1].weight.is_contiguous(memory_format=torch.channels_last)


def test_a_refused_add_param_group_adds_nothing():
    w1, b1, w2 = (torch.nn.Parameter(torch.randn(*shape)) for shape in ((8, 6), (6,), (8, 6)))
    optimizer = orthojit.Muon([("w1", w1), ("b1", b1)])
    groups = [list(g["param_names"]) for g in optimizer.param_groups]
    with pytest.raises(ValueError, match="'b1' is already a parameter"):
        optimizer.add_param_group({"params": [("w2", w2), ("b1", b1)]})
    assert [list(g["param_names"]) for g in optimizer.param_groups] == groups
    q = torch.nn.Parameter(torch.randn(16, 6))
    optimizer = orthojit.Muon([("q", q)], matrix_options={"q": {"row_splits": [4, 8, 4]}})
    plan = str(optimizer.parameter_info()[0]["plan"])
    with pytest.raises(ValueError, match="already a parameter"):
        optimizer.add_param_group({"params": [("q_again", q)], "head_rows": 8})
    assert str(optimizer.parameter_info()[0]["plan"]) == plan
    with pytest.raises(ValueError, match="eps = -1"):
        optimizer.add_param_group({"params": [("w2", w2), ("b2", torch.nn.Parameter(torch.randn(6)))], "eps": -1})
    assert len(optimizer.param_groups) == 1, "the Muon part of a refused group was added"


def test_copying_the_optimizer_is_refused_where_it_is_made():
    model = model_and_gradients()
    optimizer = orthojit.Muon(model.named_parameters())
    optimizer.step()
    for copy_it in (copy.deepcopy, pickle.dumps, lambda o: torch.save(o, io.BytesIO())):
        with pytest.raises(TypeError, match="state_dict"):
            copy_it(optimizer)


def test_state_dict_with_an_entry_made_by_reading_state_loads_back():
    w2, w3 = torch.nn.Parameter(torch.randn(8, 6)), torch.nn.Parameter(torch.randn(8, 6))
    optimizer = orthojit.Muon([("w2", w2), ("w3", w3)], preset="torch")  # skips a missing gradient
    w2.grad = torch.randn(8, 6)
    optimizer.step()
    assert "momentum_buffer" not in optimizer.state[w3]  # makes an empty entry (a defaultdict)
    saved = optimizer.state_dict()
    optimizer.load_state_dict(saved)
    assert torch.equal(optimizer.state[w2]["momentum_buffer"], saved["state"][0]["momentum_buffer"])


def test_one_cycle_lr_with_its_defaults():
    model = model_and_gradients()
    optimizer = orthojit.Muon(model.named_parameters(), preset="keller")
    assert all("momentum" not in g for g in optimizer.param_groups if not g["use_muon"]), "an AdamW group took Muon's keys"
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.02, total_steps=10)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    muon_group = next(g for g in optimizer.param_groups if g["use_muon"])
    assert 0.0 < muon_group["lr"] <= 0.02 and 0.0 <= muon_group["momentum"] < 1.0


def test_names_are_unique_and_matrix_options_name_muon_parameters():
    a, b = torch.nn.Parameter(torch.randn(8, 6)), torch.nn.Parameter(torch.randn(8, 6))
    with pytest.raises(ValueError, match="two different tensors are named 'w'"):
        orthojit.Muon([("w", a), ("w", b)])
    optimizer = orthojit.Muon([("w", a)])
    with pytest.raises(ValueError, match="named 'w'"):
        optimizer.add_param_group({"params": [("w", b)]})
    bias = torch.nn.Parameter(torch.randn(6))
    with pytest.raises(ValueError, match=r"matrix_options name \['bias'\], which are tagged AdamW"):
        orthojit.Muon([("w", a), ("bias", bias)], matrix_options={"bias": {"layout": "batch"}})


RIGHT_SIDE = """orthogonalizer right_side {
  precision { storage = f32; accumulate = f32; norm = f32; }
  coefficients jordan repeat 5;
  step {
    S = X.T @ X;
    X = a * X + b * X @ S + c * X @ S @ S;
  }
}
"""


def test_a_kernel_that_fails_to_compile_fails_the_step_before_anything_changes(tmp_path):
    # The quintic on the n x n side: the standard strategy runs it, the gram strategy refuses it when it
    # compiles a wide shape (docs/dsl.md, section 8). Under deepspeed a square matrix runs standard, so
    # the square parameter (first) compiles and the wide one (second) fails.
    program = tmp_path / "right_side.oj"
    program.write_text(RIGHT_SIDE)
    torch.manual_seed(2)
    square, wide = torch.nn.Parameter(torch.randn(8, 8)), torch.nn.Parameter(torch.randn(8, 16))
    module = torch.nn.Module()
    module.square, module.wide = square, wide
    optimizer = orthojit.Muon(module.named_parameters(), preset="deepspeed",
                              settings={"muon.program": str(program), "muon.strategy": "gram"})
    square.grad, wide.grad = torch.randn(8, 8), torch.randn(8, 16)
    before = snapshot(module, optimizer)
    with pytest.raises(Exception, match="gram strategy"):
        optimizer.step()
    assert_unchanged(module, optimizer, before)
    assert "momentum_buffer" not in optimizer.state[square] or not optimizer.state[square]["momentum_buffer"].any()


def stepped_model_and_optimizer():
    model = model_and_gradients(3)
    optimizer = orthojit.Muon(model.named_parameters())
    optimizer.step()
    model(torch.randn(16, 8)).square().mean().backward()
    return model, optimizer


@pytest.mark.parametrize("spoil, message", [
    # a parameter given new memory of another shape: its plan and state are for the old one
    (lambda m, o: (setattr(m[0].weight, "data", torch.rand(4, 8)), setattr(m[0].weight.grad, "data", torch.rand(4, 8))),
     r"parameter '0.weight' has shape \(4, 8\), but it had \(12, 8\)"),
    (lambda m, o: setattr(m[0].weight.grad, "data", torch.rand(4, 8)), r"its gradient has shape \(4, 8\), the parameter \(12, 8\)"),
    (lambda m, o: setattr(m[1].bias.grad, "data", torch.rand(2)), r"its gradient has shape \(2,\), the parameter \(6,\)"),
    (lambda m, o: o.state[m[0].weight].update(momentum_buffer=torch.zeros(4, 4)),
     r"state 'momentum_buffer' is torch.float32 \(4, 4\), expected torch.float32 \(12, 8\)"),
    (lambda m, o: o.state[m[0].weight].update(momentum_buffer=o.state[m[0].weight]["momentum_buffer"].double()),
     r"state 'momentum_buffer' is torch.float64"),
    # AdamW's state: the second AdamW parameter's, so that a step updating one by one would already
    # have changed the first
    (lambda m, o: o.state[m[1].bias].update(exp_avg=torch.zeros(2)), r"'1.bias': state 'exp_avg' is torch.float32 \(2,\)"),
    (lambda m, o: o.state[m[1].bias].update(exp_avg_sq=o.state[m[1].bias]["exp_avg_sq"].double()), r"state 'exp_avg_sq' is torch.float64"),
    (lambda m, o: o.state[m[1].bias].update(step=torch.tensor(-5)), r"state 'step' is -5, a negative step count"),
    (lambda m, o: o.state[m[1].bias].update(step="x"), r"state 'step' is a str"),
    (lambda m, o: o.state[m[1].bias].pop("exp_avg"), r"its AdamW state has \['exp_avg_sq', 'step'\]"),
])
def test_a_parameter_gradient_or_state_of_the_wrong_shape_fails_the_step_before_anything_changes(spoil, message):
    # The runtime steps raw memory: a shrunk parameter, a short gradient or a small momentum buffer
    # was read and written past its end (NaN parameters, then a heap corruption), and AdamW's state
    # was checked one parameter at a time, after the first had been updated.
    model, optimizer = stepped_model_and_optimizer()
    spoil(model, optimizer)
    before = snapshot(model, optimizer)
    with pytest.raises(ValueError, match=message):
        optimizer.step()
    assert_unchanged(model, optimizer, before)


@pytest.mark.parametrize("spoil, message", [
    (lambda sd, k: sd["state"][k["muon"]]["momentum_buffer"].view(-1).__setitem__(5, float("nan")), r"momentum_buffer' holds a NaN"),
    (lambda sd, k: sd["state"][k["adam"]]["exp_avg_sq"].view(-1).__setitem__(0, -1.0), r"exp_avg_sq' holds a negative value"),
    (lambda sd, k: sd["state"][k["adam"]].update(step=torch.tensor(-1)), r"'1.bias.step' holds a negative value"),
    (lambda sd, k: sd["param_groups"][0].update(lr="abc"), r"lr = 'abc'"),
    (lambda sd, k: sd["param_groups"][0].pop("momentum"), r"momentum = None"),
    (lambda sd, k: sd["param_groups"][0].update(nesterov="no"), r"nesterov = 'no'"),
    (lambda sd, k: sd.pop("state"), r"a dict with 'state' \(a dict\) and 'param_groups' \(a list\)"),
    (lambda sd, k: sd.update(state=[]), r"a dict with 'state'"),
    (lambda sd, k: sd["state"].update({k["adam"]: 5}), r"has state a int"),
    (lambda sd, k: sd.update(orthojit={"steps_taken": "abc"}), r"steps_taken >= 0"),
])
def test_a_state_dict_that_could_not_drive_a_step_is_refused_at_load(spoil, message):
    model, optimizer = stepped_model_and_optimizer()
    state_dict = optimizer.state_dict()
    index = {"muon": 0, "adam": None}
    adam_group = next(g for g in state_dict["param_groups"] if not g["use_muon"])
    index["adam"] = adam_group["params"][adam_group["param_names"].index("1.bias")]
    index["muon"] = next(i for i, s in state_dict["state"].items() if "momentum_buffer" in s)
    spoil(state_dict, index)
    before = snapshot(model, optimizer)
    with pytest.raises(ValueError, match=message):
        optimizer.load_state_dict(state_dict)
    assert_unchanged(model, optimizer, before)
    optimizer.step()  # what it held is still usable


@pytest.mark.parametrize("make, error, message", [
    (lambda m: orthojit.Muon(m.named_parameters(), use_muon={"0.weight": "no"}), TypeError,
     r"use_muon gives parameter '0.weight' 'no'; expected True, False or None"),  # bool("no") is True: it tagged Muon
    (lambda m: orthojit.Muon([{"params": list(m.named_parameters()), "use_muon": "no"}]), TypeError, r"a param group's use_muon is 'no'"),
    (lambda m: orthojit.Muon(m.named_parameters(), betas=0.9), ValueError, r"betas = 0.9; expected two numbers"),
    (lambda m: orthojit.Muon.from_deepspeed_config(m.named_parameters(), {"optimizer": {"type": "muon", "params": {}}}, strict="no"),
     TypeError, r"strict must be True or False, got 'no'"),
])
def test_switches_and_tags_of_the_wrong_type_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        make(model_and_gradients())


@pytest.mark.parametrize("make, error, message", [
    (lambda m: orthojit.Muon(m.named_parameters(), preset=None), TypeError, r"preset must be a name from orthojit.muon_presets\(\)"),
    (lambda m: orthojit.Muon(m.named_parameters(), settings={3: 4}), TypeError, r"settings keys are setting names \(str"),  # std::bad_cast
    (lambda m: orthojit.DistributedMuon(m.named_parameters(), "local", preset=None), TypeError, r"preset must be a name"),
    (lambda m: orthojit.Muon.from_deepspeed_config(m.named_parameters(), "/"), ValueError, r"'/' is a directory"),  # "no such file"
    (lambda m: orthojit.Muon.from_deepspeed_config(m.named_parameters(), "[1]"), ValueError, r"expected a JSON object, found list"),
])
def test_construction_arguments_are_named_when_wrong(make, error, message):
    with pytest.raises(error, match=message):
        make(model_and_gradients())


def test_a_tensor_put_into_param_groups_by_hand_fails_the_step_before_anything_changes():
    # It had no plan and no recorded shape: a KeyError naming an object id.
    model = model_and_gradients()
    optimizer = orthojit.Muon(model.named_parameters())
    optimizer.param_groups[0]["params"][0] = torch.nn.Parameter(torch.zeros(12, 8))
    before = snapshot(model, optimizer)
    with pytest.raises(ValueError, match=r"holds a tensor at parameter '0.weight' that was not added to the optimizer"):
        optimizer.step()
    assert_unchanged(model, optimizer, before)
