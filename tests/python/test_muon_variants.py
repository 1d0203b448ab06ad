"""orthojit.Muon(variant="normuon" | "adamuon") against the papers' formulas written here in torch
float64: NorMuon (arXiv 2510.05491; normuon_update in zichongli5/NorMuon normuon.py) and AdaMuon
(arXiv 2507.11005: NS(sign(M)), element-wise second moment of O, RMS-aligned rescaling;
Chongjie-Si/AdaMuon adamuon.py), several steps on fresh gradients, a wide and a tall matrix; the
state_dict round trip and the refusal of another variant's state.

The optimizer runs its NS on the reference backend in f64 storage and the test's NS is a plain f64
quintic, so they agree to f64 rounding; the runtime's f32 roundings (state, U, O, O', parameters)
are repeated here at the same points, and a 1e-15 difference can move one of them by an ulp
(6e-8 relative) that the lr-sized step carries into p: 2e-6 of the largest parameter bounds it."""

import math

import pytest

torch = pytest.importorskip("torch")

import orthojit  # noqa: E402

JORDAN = (3.4445, -4.7750, 2.0315)
EXACT = {"muon.backend": "ref", "muon.precision": "f64"}


def f32(x):
    return x.to(torch.float32).to(torch.float64)


def newton_schulz(g, steps=5, eps=1e-7):
    x = g.to(torch.float64)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (torch.linalg.norm(x) + eps)
    a, b, c = JORDAN
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class Reference:
    """One matrix parameter: EMA momentum with Nesterov, then the variant's rescaling."""

    def __init__(self, variant, shape, lr, beta, wd, beta2, eps, adamw_scale):
        self.variant, self.lr, self.beta, self.wd, self.beta2, self.eps = variant, lr, beta, wd, beta2, eps
        self.adamw_scale = adamw_scale
        self.momentum = torch.zeros(shape, dtype=torch.float64)
        self.v = torch.zeros((shape[0], 1) if variant == "normuon" else shape, dtype=torch.float64)
        self.t = 0

    def step(self, p, g):
        g = g.double()
        self.momentum = f32(self.momentum + (1 - self.beta) * (g - self.momentum))
        u = f32(g + self.beta * (self.momentum - g))
        if self.variant == "adamuon":
            u = torch.sign(u)  # the paper's sign stabilization
        o = f32(newton_schulz(u))
        rows, cols = o.shape
        if self.variant == "normuon":
            norm = torch.linalg.norm(o)
            self.v = f32(self.v + (1 - self.beta2) * ((o * o).mean(dim=1, keepdim=True) - self.v))
            out = o / (self.v.sqrt() + self.eps)
            out = f32(out * norm / (torch.linalg.norm(out) + self.eps))
            scale = math.sqrt(max(1.0, rows / cols))
        else:
            self.t += 1
            self.v = f32(self.beta2 * self.v + (1 - self.beta2) * o * o)
            out = o / ((self.v / (1 - self.beta2 ** self.t)).sqrt() + self.eps)
            out = f32(out * math.sqrt(min(rows, cols)) / (torch.linalg.norm(out) + self.eps))
            scale = 0.2 * math.sqrt(max(rows, cols)) if self.adamw_scale else math.sqrt(max(1.0, rows / cols))
        return f32(p.double() * (1 - self.lr * self.wd) - self.lr * scale * out)


def assert_close(actual, expected, what):
    largest = max(expected.abs().max().item(), 1e-30)
    error = (actual.detach().double() - expected).abs().max().item()
    assert error <= 2e-6 * largest, f"{what}: max error {error:.3g} > {2e-6 * largest:.3g}"


@pytest.mark.parametrize("variant, beta2, eps, adjust", [("normuon", 0.95, 1e-10, "original"), ("adamuon", 0.999, 1e-8, "match_rms_adamw")])
def test_variants_match_their_papers_formulas(variant, beta2, eps, adjust):
    torch.manual_seed(7)
    wide = torch.nn.Parameter(torch.randn(6, 10))
    tall = torch.nn.Parameter(torch.randn(12, 5))
    optimizer = orthojit.Muon([("wide", wide), ("tall", tall)], preset="keller", variant=variant, weight_decay=0.05, use_muon=lambda n, t: True,
                              settings=dict(EXACT, **{"muon.lr_adjust": adjust}))
    lr = optimizer.param_groups[0]["lr"]
    refs = {name: Reference(variant, tuple(p.shape), lr, 0.95, 0.05, beta2, eps, adjust == "match_rms_adamw") for name, p in (("wide", wide), ("tall", tall))}
    expected = {"wide": wide.detach().double().clone(), "tall": tall.detach().double().clone()}
    for step in range(4):
        for name, p in (("wide", wide), ("tall", tall)):
            p.grad = torch.randn_like(p)
            expected[name] = refs[name].step(expected[name], p.grad)
        optimizer.step()
        assert not optimizer.last_report.skipped
        assert_close(wide, expected["wide"], f"{variant} wide, step {step}")
        assert_close(tall, expected["tall"], f"{variant} tall, step {step}")
    state = optimizer.state[wide]
    assert set(state) == ({"momentum_buffer", "second_momentum_buffer"} if variant == "normuon" else {"momentum_buffer", "v_buffer", "variant_step"})


@pytest.mark.parametrize("variant", ["normuon", "adamuon"])
def test_state_dict_round_trip_and_other_variants_refused(variant):
    torch.manual_seed(3)
    w = torch.nn.Parameter(torch.randn(5, 8))
    optimizer = orthojit.Muon([("w", w)], preset="keller", variant=variant, use_muon=lambda n, t: True, settings=EXACT)
    for _ in range(2):
        w.grad = torch.randn_like(w)
        optimizer.step()
    saved, w_saved = optimizer.state_dict(), w.detach().clone()
    grad = torch.randn_like(w)
    w.grad = grad.clone()
    optimizer.step()
    w_after = w.detach().clone()
    optimizer.load_state_dict(saved)
    with torch.no_grad():
        w.copy_(w_saved)
    w.grad = grad.clone()
    optimizer.step()
    assert torch.equal(w.detach(), w_after)

    for other in {"muon", "normuon", "adamuon"} - {variant}:
        different = orthojit.Muon([("w", torch.nn.Parameter(w.detach().clone()))], preset="keller", variant=other,
                                  use_muon=lambda n, t: True, settings=EXACT)
        with pytest.raises(ValueError, match=f"variant='{variant}'"):
            different.load_state_dict(saved)


@pytest.mark.parametrize("variant", ["muon", "normuon", "adamuon"])
def test_a_state_file_resumes_bit_exactly_and_moves_to_distributed_muon(variant, tmp_path):
    # save_state writes the C++ optimizers' state file (with the groups' hyperparameters); a fresh
    # optimizer that loads it steps bit-identically to the one that saved it. A parameter not yet
    # stepped (the bias here) is saved as zeros and behaves as fresh state.
    torch.manual_seed(11)
    model = torch.nn.Linear(8, 5)
    twin = torch.nn.Linear(8, 5)
    twin.load_state_dict(model.state_dict())
    make = lambda m: orthojit.Muon(m.named_parameters(), preset="keller", variant=variant, settings=EXACT)  # noqa: E731
    optimizer, resumed = make(model), make(twin)
    # A state saved before any step (no state yet) loads as a fresh optimizer's.
    fresh_path = tmp_path / "fresh.safetensors"
    make(model).save_state(fresh_path)
    fresh_model, loaded_model = torch.nn.Linear(8, 5), torch.nn.Linear(8, 5)
    loaded_model.load_state_dict(fresh_model.state_dict())
    fresh, loaded = make(fresh_model), make(loaded_model)
    loaded.load_state(fresh_path)
    for p, q in zip(fresh_model.parameters(), loaded_model.parameters()):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    fresh.step()
    loaded.step()
    assert all(torch.equal(p, q) for p, q in zip(fresh_model.parameters(), loaded_model.parameters())), "fresh state"
    for _ in range(2):
        model.weight.grad = torch.randn_like(model.weight)
        optimizer.step()
    optimizer.param_groups[0]["lr"] *= 0.5
    optimizer.param_groups[1]["betas"] = (0.8, 0.95)
    path = tmp_path / "state.safetensors"
    optimizer.save_state(path)
    with torch.no_grad():
        for p, q in zip(twin.parameters(), model.parameters()):
            p.copy_(q)
    resumed.load_state(path)
    assert resumed.steps_taken == optimizer.steps_taken == 2
    assert [g["lr"] for g in resumed.param_groups] == [g["lr"] for g in optimizer.param_groups]
    assert resumed.param_groups[1]["betas"] == (0.8, 0.95)
    for _ in range(2):
        grads = [torch.randn_like(p) for p in model.parameters()]
        for p, q, g in zip(model.parameters(), twin.parameters(), grads):
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        resumed.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p, q), variant
    if variant == "muon":  # DistributedMuon runs Muon's update only
        distributed = orthojit.DistributedMuon(twin.named_parameters(), comm="local", preset="keller", settings=EXACT)
        optimizer.save_state(path)
        distributed.load_state(path)
        mine, theirs = distributed.state_dict(), optimizer.state_dict()
        assert all(torch.equal(mine["state"][i][k], v) for i, s in theirs["state"].items() for k, v in s.items())
        distributed.save_state(path)
        back = make(torch.nn.Linear(8, 5))
        back.load_state(path)
        again = back.state_dict()
        assert all(torch.equal(again["state"][i][k], v) for i, s in theirs["state"].items() for k, v in s.items())
        assert [g["lr"] for g in back.param_groups] == [g["lr"] for g in optimizer.param_groups]
    # Another variant's file is refused with the setting to use; a corrupt one changes nothing.
    other = "adamuon" if variant != "adamuon" else "normuon"
    different = orthojit.Muon(torch.nn.Linear(8, 5).named_parameters(), preset="keller", variant=other, settings=EXACT)
    with pytest.raises((ValueError, RuntimeError), match=f"variant='{variant}'|'{variant}'"):
        different.load_state(path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    before = resumed.state_dict()
    with pytest.raises(OSError, match="the data is corrupt"):
        resumed.load_state(path)
    after = resumed.state_dict()
    assert all(torch.equal(after["state"][i][k], v) for i, s in before["state"].items() for k, v in s.items())


def test_a_bad_variant_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="not muon, normuon or adamuon"):
        orthojit.Muon([torch.nn.Parameter(torch.randn(4, 4))], variant="adamw")
