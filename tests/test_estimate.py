"""The estimator against measurement: activations within 1%, parameters, gradients and states exact."""

import copy

import matplotlib.pyplot as plt
import pytest
import torch

from utils.ledger.gpt import PRESETS, TransformerShape, transformer_activation_bytes, transformer_memory
from utils.lessons.estimate import checkpointed, estimate_memory, main, make_optimizer, measure_step, validate
from utils.lessons.measure import gradient_bytes, optimizer_state_bytes, parameter_bytes, saved_activation_bytes
from utils.lessons.models import GPT, GPTConfig, cnn, gpt_batch, mlp


def variants():
    torch.manual_seed(0)
    cfg = dict(n_layer=3, d_model=64, n_head=4, seq_len=32, vocab_size=100)
    gpt_in = tuple(t.contiguous() for t in gpt_batch(GPTConfig(**cfg), 3))
    return {
        "mlp": (mlp(32, 128, 10, depth=4), (torch.randn(16, 32),)),
        "cnn": (cnn(8, 10, 12), (torch.randn(4, 3, 12, 12),)),
        "gpt-eager": (GPT(GPTConfig(**cfg, attention="eager")), gpt_in),
        "gpt-sdpa": (GPT(GPTConfig(**cfg, attention="sdpa")), gpt_in),
    }


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt-eager", "gpt-sdpa"])
def test_activations_within_one_percent_of_measured(name, checkpointing):
    model, inputs = variants()[name]
    with checkpointed(model) if checkpointing else torch.enable_grad():
        measured = saved_activation_bytes(model, *inputs)
    estimated = estimate_memory(model, inputs, checkpointing=checkpointing).activations
    assert abs(estimated - measured) <= 0.01 * measured, (estimated, measured)


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adam", "adamw"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "bf16"])
def test_parameters_gradients_states_exact(optimizer, precision):
    model, inputs = variants()["mlp"]
    model[0].weight.requires_grad_(False)  # a frozen layer has no gradient and no optimizer state
    est = estimate_memory(model, inputs, optimizer=optimizer, precision=precision)
    real = copy.deepcopy(model).to(torch.bfloat16) if precision == "bf16" else copy.deepcopy(model)
    x = inputs[0].to(torch.bfloat16) if precision == "bf16" else inputs[0]
    opt = make_optimizer(optimizer, real.parameters())
    dtype = torch.bfloat16 if precision == "bf16-mixed" else None
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = real(x).float().sum()
    loss.backward()
    opt.step()
    assert est.params == parameter_bytes(real)
    assert est.grads == gradient_bytes(real)
    assert est.optimizer_states == optimizer_state_bytes(opt)


@pytest.mark.parametrize(("precision", "checkpointing", "batch"), [("fp32", False, 4), ("fp32", True, 8),
                                                                   ("bf16-mixed", False, 4)])
def test_total_matches_the_measured_step_peak(precision, checkpointing, batch):
    cfg = GPTConfig(n_layer=2, d_model=32, n_head=4, seq_len=32, vocab_size=64)
    model = GPT(cfg)
    inputs = gpt_batch(cfg, batch)
    measured = measure_step(model, inputs, precision=precision, checkpointing=checkpointing)
    est = estimate_memory(model, inputs, precision=precision, checkpointing=checkpointing)
    assert abs(est.total - measured) <= 0.01 * measured


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "bf16"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_analytic_agrees_with_traced(attention, precision, checkpointing):
    shape = TransformerShape(n_layer=3, d_model=48, n_head=4, seq_len=24, vocab_size=70)
    model = GPT(GPTConfig(n_layer=3, d_model=48, n_head=4, seq_len=24, vocab_size=70, attention=attention))
    inputs = tuple(t.contiguous() for t in gpt_batch(model.cfg, 2))
    traced = estimate_memory(model, inputs, precision=precision, checkpointing=checkpointing)
    analytic = transformer_memory(shape, 2, precision=precision, checkpointing=checkpointing, attention=attention)
    assert analytic.activations == traced.activations
    assert (analytic.params, analytic.grads, analytic.optimizer_states) == (
        traced.params, traced.grads, traced.optimizer_states)
    assert shape.n_params == sum(p.numel() for p in model.parameters())


def test_large_models_on_meta_and_presets():
    shape = PRESETS["1.3B"]
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=shape.n_layer, d_model=shape.d_model, n_head=shape.n_head,
                              seq_len=shape.seq_len, vocab_size=shape.vocab_size))
    x = torch.zeros(1, shape.seq_len, dtype=torch.long, device="meta")
    y = torch.zeros(1, shape.seq_len, dtype=torch.long, device="meta")
    traced = estimate_memory(model, (x, y), precision="bf16-mixed")
    analytic = transformer_memory(shape, 1, precision="bf16-mixed")
    assert traced.activations == analytic.activations and traced.params == analytic.params
    assert next(model.parameters()).device.type == "meta", "the model is left as it was"
    assert 6e9 < PRESETS["7B"].n_params < 7.5e9


def test_model_is_left_unchanged():
    model, inputs = variants()["gpt-sdpa"]
    before = [(id(p), p.dtype) for p in model.parameters()]
    estimate_memory(model, inputs, precision="bf16", checkpointing=True)
    assert before == [(id(p), p.dtype) for p in model.parameters()]
    assert all(p.grad is None for p in model.parameters())
    assert "forward" not in vars(model.blocks[0])


def test_bad_arguments():
    model, inputs = variants()["mlp"]
    with pytest.raises(ValueError, match="optimizer"):
        estimate_memory(model, inputs, optimizer="lion")
    with pytest.raises(ValueError, match="precision"):
        estimate_memory(model, inputs, precision="fp8")
    with pytest.raises(TypeError, match="checkpointing"):
        estimate_memory(model, inputs, checkpointing="yes")
    with pytest.raises(TypeError, match="model"):
        estimate_memory("gpt", inputs)
    with pytest.raises(TypeError, match="example_inputs"):
        estimate_memory(model, [1, 2])
    with pytest.raises(TypeError, match="loss_fn"):
        estimate_memory(model, inputs, loss_fn=3)
    with pytest.raises(ValueError, match="checkpointing needs"):
        with checkpointed(torch.nn.Linear(2, 2)):
            pass
    with pytest.raises(ValueError, match="divisible"):
        TransformerShape(2, 10, 3, 8, 8)
    with pytest.raises(ValueError, match="batch"):
        transformer_activation_bytes(PRESETS["7B"], 0)
    with pytest.raises(ValueError, match="attention"):
        transformer_activation_bytes(PRESETS["7B"], 1, attention="flash")
    with pytest.raises(TypeError, match="shape"):
        transformer_memory("7B", 1)
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("lion", model.parameters())


def test_validate_table(capsys):
    main(["--validate"])  # validate()'s rows, printed: the header, its rule and at least 8 rows
    out = capsys.readouterr().out
    assert "16 B/param" in out and "measured" in out and out.count("\n|") >= 10


def test_will_it_fit_and_bar():
    from utils.ledger.plan import will_it_fit
    from utils.lessons.plots import memory_bar

    small = will_it_fit("163M", 8, 1024, gpu="T4")
    big = will_it_fit("65B", 1, 4096, precision="fp32", gpu="H100")
    assert small.fits and small.margin > 0 and not big.fits and big.margin < 0
    assert will_it_fit("7B", 8, 4096, checkpointing=True).estimate.activations < \
        will_it_fit("7B", 8, 4096).estimate.activations
    # one sequence: the peak is AdamW's multi-tensor step (4 B/param of temporaries), with no activation alive
    one = will_it_fit("7B", 1, 4096, checkpointing=True).estimate
    assert one.activations == 20 * 4096 and one.optimizer_temporaries == 4 * PRESETS["7B"].n_params  # the batch
    fig = memory_bar({"params": 10, "grads": 5}, capacity=20, title="t", unit=1, unit_name="B")
    assert len(fig.axes[0].patches) == 2
    plt.close(fig)
    custom = will_it_fit(TransformerShape(4, 256, 4, 128, 1000), 2, 512, gpu="T4")
    assert custom.fits and custom.estimate.params == TransformerShape(4, 256, 4, 512, 1000).n_params * 4
    for kwargs, match in (({"preset": "3B"}, "model"), ({"gpu": "V100"}, "gpu"), ({"seq_len": 0}, "seq_len")):
        args = {"preset": "7B", "batch": 1, "seq_len": 128} | kwargs
        with pytest.raises(ValueError, match=match):
            will_it_fit(args.pop("preset"), args.pop("batch"), args.pop("seq_len"), **args)
    with pytest.raises(ValueError, match="parts"):
        memory_bar({"x": -1})


def test_bad_arguments_are_named():
    """utils.validate's checks: unknown names, None shapes and bools where ints are meant are refused by name."""
    from utils.ledger.gpt import state_bytes_per_element
    from utils.ledger.plan import GPU_USABLE_BYTES, will_it_fit
    from utils.lessons.estimate import autocast_dtype, param_dtype

    model, inputs = variants()["mlp"]
    with pytest.raises(ValueError, match="precision"):
        estimate_memory(model, inputs, precision="bf16_mixed")
    with pytest.raises(TypeError, match="checkpointing"):
        estimate_memory(model, inputs, checkpointing=1)
    with pytest.raises(TypeError, match="n_layer"):
        TransformerShape(None, 64, 4, 64, 256)
    with pytest.raises(TypeError, match="seq_len"):
        TransformerShape(2, 64, 4, True, 256)
    with pytest.raises(TypeError, match="batch"):
        transformer_activation_bytes(PRESETS["7B"], True)
    with pytest.raises(TypeError, match="batch"):
        transformer_memory(PRESETS["7B"], None)
    with pytest.raises(TypeError, match="shape"):
        transformer_activation_bytes(None, 1)
    with pytest.raises(ValueError, match="attention"):
        transformer_memory(PRESETS["7B"], 1, attention="flash")
    with pytest.raises(ValueError, match="optimizer"):
        transformer_memory(PRESETS["7B"], 1, optimizer="Adam")
    with pytest.raises(ValueError, match="precision"):
        param_dtype("fp8")
    with pytest.raises(ValueError, match="precision"):
        autocast_dtype(None)
    with pytest.raises(ValueError, match="optimizer"):
        state_bytes_per_element("lion", "fp32")
    with pytest.raises(ValueError, match="lr"):
        make_optimizer("sgd", model.parameters(), lr=-1.0)
    with pytest.raises(TypeError, match="model"):
        measure_step("gpt", inputs)
    with pytest.raises(ValueError, match="model"):
        will_it_fit(["7B"], 1, 128)
    with pytest.raises(TypeError, match="batch"):
        will_it_fit("7B", False, 128)
    with pytest.raises(ValueError, match="gpu"):
        will_it_fit("7B", 1, 128, gpu="h100")
    # A GPU reports less than its marketed size: the widget plans with what it reports.
    assert GPU_USABLE_BYTES["T4"] < 16 * 10**9 and GPU_USABLE_BYTES["H100"] < 80 * 2**30
    assert will_it_fit("163M", 1, 128, gpu="T4").capacity == GPU_USABLE_BYTES["T4"]


def test_measure_step_and_validate_name_bad_input():
    """Issue 27: bytes as inputs and a configuration without its keys raised AttributeError / KeyError."""
    model, _ = variants()["mlp"]
    for bad in (b"..", "x", None, [1, 2]):
        with pytest.raises(TypeError, match="inputs"):
            measure_step(model, inputs=bad)
    with pytest.raises(TypeError, match="loss_fn"):
        measure_step(model, torch.randn(2, 8), loss_fn=3)
    with pytest.raises(ValueError, match=r"configs\[0\].*batch"):
        validate([{}])
    with pytest.raises(TypeError, match=r"configs\[0\]"):
        validate([None])
    with pytest.raises(TypeError, match="configs"):
        validate("fp32")
    with pytest.raises(ValueError, match="configs"):
        validate([])
    with pytest.raises(ValueError, match="precision"):
        validate([{"precision": "fp8", "optimizer": "adamw", "checkpointing": False, "batch": 1}])
    with pytest.raises(ValueError, match="batch"):
        validate([{"precision": "fp32", "optimizer": "adamw", "checkpointing": False, "batch": 0}])


def test_make_optimizer_names_bad_params():
    for bad in (None, 3, "w", torch.zeros(2)):
        with pytest.raises(TypeError, match="params"):
            make_optimizer("adamw", bad)
    with pytest.raises(TypeError, match="params"):
        make_optimizer("adamw", [None])


def test_each_preset_is_named_by_its_own_parameter_count() -> None:
    """Review (issue 35): the "125M" preset had 163M parameters (GPT-2 small's shape with an untied head); a preset's
    name is its size, so it must be the count this ledger computes, within 10% (1.3B is 1.42B: GPT-3 XL's shape)."""
    from utils.ledger.gpt import PRESETS

    scale = {"M": 1e6, "B": 1e9}
    for name, shape in PRESETS.items():
        named = float(name[:-1]) * scale[name[-1]]
        assert abs(shape.n_params / named - 1) < 0.10, (name, shape.n_params)
