"""weave.hf without a GPU: the plan (which projection becomes which layer, each rank's shard and
heads) and its refusals, and the swap itself on a tiny transformers Llama in an emulated world:
one thread per rank, the projections swapped (by weave.hf's own _swap, as the plan says) for torch
stand-ins that compute what weave's layers do (this rank's shard; the row-parallel ones summed
over the threads in rank order, as GemmAllReduce sums; fp8 through tests/python/quant.py's
quantisers), prefill and decode with HF's KV cache, against the unmodified model. Skips where torch
or transformers is not installed."""
import copy
import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import quant  # noqa: E402
import weave  # noqa: E402
import weave.hf  # noqa: E402
import weave.nn  # noqa: E402

PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj"]
ROW = {"self_attn.o_proj", "mlp.down_proj"}


def tiny_model(seed=0, dtype=torch.float32, **config):
    """A 2-layer Llama (hidden 256, 8 heads of 32, 4 KV heads, MLP 512, vocab 512), random weights."""
    kw = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=512, max_position_embeddings=256)
    kw.update(config)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).to(dtype).eval()


def test_layers_of_one_shape_share_one_op_on_a_communicator():
    """weave.nn's share_op: one op per (op class, config) on a communicator; other shapes, other
    communicators and share_op=False get their own (the cache alone, with a stand-in op class)."""
    from weave import nn as wnn

    class Op:
        def __init__(self, comm, **config):
            self.comm, self.config = comm, config

    class Comm:
        pass

    a, b = Comm(), Comm()
    one = wnn._op_for(Op, a, True, n=256, k=128, m_max=300, quant="bf16")
    assert wnn._op_for(Op, a, True, k=128, n=256, m_max=300, quant="bf16") is one  # keyword order aside
    assert wnn._op_for(Op, a, True, n=256, k=128, m_max=600, quant="bf16") is not one
    assert wnn._op_for(Op, a, True, n=256, k=128, m_max=300, quant="ptpc") is not one
    assert wnn._op_for(Op, b, True, n=256, k=128, m_max=300, quant="bf16") is not one
    assert wnn._op_for(Op, a, False, n=256, k=128, m_max=300, quant="bf16") is not one
    with pytest.raises(weave.ArgumentError, match="argument 'share_op': must be a bool"):
        wnn._share_op(1)


def test_the_plan_maps_each_projection_to_its_layer_and_shard():
    model = tiny_model()
    plan = weave.hf.plan_tensor_parallel(model, 2, quant="ptpc", max_tokens=300)
    assert (plan.world, plan.quant, plan.max_tokens) == (2, "ptpc", 300)
    assert plan.decoder_layers == ("model.layers.0", "model.layers.1")
    assert [s.name for s in plan.linears] == [f"model.layers.{i}.{p}" for i in range(2) for p in PROJECTIONS]
    whole = {"q_proj": (256, 256), "k_proj": (128, 256), "v_proj": (128, 256), "o_proj": (256, 256),
             "gate_proj": (512, 256), "up_proj": (512, 256), "down_proj": (256, 512)}  # [out, in]
    for s in plan.linears:
        leaf = s.name.rsplit(".", 1)[1]
        row = s.name.split(".", 3)[3] in ROW
        assert s.parallel == ("row" if row else "column"), s.name
        out, inp = whole[leaf]
        assert (s.out_features, s.in_features) == (out, inp), s.name
        # column: out / world rows of the weight (its heads or features); row: in / world columns.
        assert s.shard_shape == ((out, inp // 2) if row else (out // 2, inp)), s.name
        want_window = (weave.GemmAllReduce.window_bytes(n=out, k=inp // 2, m_max=300, world=2, quant="ptpc")
                       if row else 0)
        assert s.window_bytes == want_window and (want_window > 0) == row, s.name
    assert (plan.heads, plan.kv_heads, plan.head_dim) == (8, 4, 32)
    assert (plan.heads_per_rank, plan.kv_heads_per_rank) == (4, 2)
    # By default the decoder layers' projections of one shape share one op: one window per shape
    # (o_proj's and down_proj's here), not one per projection.
    assert plan.share_ops
    assert plan.window_bytes == sum({s.shard_shape: s.window_bytes for s in plan.linears if s.parallel == "row"}.values())
    assert 2 * plan.window_bytes == sum(s.window_bytes for s in plan.linears)  # two decoder layers
    assert "one op per shape" in plan.describe()
    own = weave.hf.plan_tensor_parallel(model, 2, quant="ptpc", max_tokens=300, share_ops=False)
    assert own.window_bytes == sum(s.window_bytes for s in plan.linears) and "one op per shape" not in own.describe()
    with pytest.raises(weave.ArgumentError, match="argument 'share_ops': must be a bool"):
        weave.hf.plan_tensor_parallel(model, 2, share_ops="yes")
    assert "10 column-parallel, 4 row-parallel" in plan.describe() and "heads 4 of 8" in plan.describe()
    one = weave.hf.plan_tensor_parallel(model, 1)
    assert [s.shard_shape for s in one.linears] == [(s.out_features, s.in_features) for s in one.linears]


def test_the_plan_of_a_full_size_model_needs_no_weights():
    """A Llama-3-8B-shaped model on the meta device (no memory): planned at world 8 in every quant
    (1 KV head per rank), refused at 16 (8 KV heads)."""
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    for mode in ("bf16", "ptpc", "blockscale", "mxfp8"):
        plan = weave.hf.plan_tensor_parallel(model, 8, quant=mode, max_tokens=8192)
        assert len(plan.linears) == 32 * 7 and (plan.heads_per_rank, plan.kv_heads_per_rank) == (4, 1)
        down = plan.linears[6]
        assert (down.name, down.parallel, down.shard_shape) == ("model.layers.0.mlp.down_proj", "row", (4096, 1792))
    with pytest.raises(weave.ArgumentError, match=r"num_key_value_heads \(8\) must be divisible by the world \(16\)"):
        weave.hf.plan_tensor_parallel(model, 16)


def _with_attn(model, **replace):
    layer = model.model.layers[1]
    for path, module in replace.items():
        parent, _, leaf = path.partition(".")
        setattr(getattr(layer, parent), leaf, module)
    return model


def _stand_in_weave_layer():
    layer = object.__new__(weave.nn.ColumnParallelLinear)
    torch.nn.Module.__init__(layer)
    return layer


@pytest.mark.parametrize("make, world, kw, needle", [
    (lambda: tiny_model(), 16, {}, r"'world': the model's num_attention_heads \(8\) must be divisible by the world "
                                   r"\(16\): each rank holds whole attention heads"),
    (lambda: tiny_model(num_key_value_heads=2), 4, {},
     r"'world': the model's num_key_value_heads \(2\) must be divisible by the world \(4\): each rank holds whole KV "
     r"heads"),
    (lambda: tiny_model(num_key_value_heads=8, intermediate_size=516), 8, {},
     r"'world': model.layers.0.mlp.gate_proj \(column-parallel\) has 516 output features, which must be divisible"),
    (lambda: tiny_model(), 4, {"quant": "blockscale"},
     r"model.layers.0.self_attn.o_proj as a row-parallel layer at world 4, quant blockscale \(weave.GemmAllReduce of "
     r"this rank's weight \[256, 64\]\): .*multiple of 128"),
    (lambda: tiny_model(intermediate_size=520), 2, {},
     r"model.layers.0.mlp.gate_proj as a column-parallel layer at world 2, quant bf16 \(weave.gemm of this rank's "
     r"weight \[260, 256\]\): n must be a multiple of 8"),
    (lambda: tiny_model(hidden_size=192, num_attention_heads=6, num_key_value_heads=6), 1, {"quant": "blockscale"},
     r"model.layers.0.self_attn.q_proj as a column-parallel layer at world 1, quant blockscale \(weave.gemm .*"
     r"multiple of 128"),
    (lambda: tiny_model(), 2, {"quant": "fp4"}, "'quant': must be one of bf16, ptpc, blockscale"),
    (lambda: tiny_model(), 0, {}, "'world': must be a positive int"),
    (lambda: tiny_model(), 2, {"max_tokens": 0}, "'max_tokens': must be a positive int"),
    (lambda: torch.nn.Linear(4, 4), 2, {},
     "'model': must be a transformers model whose config has num_attention_heads"),
    (lambda: "a model", 2, {}, "'model': must be a torch.nn.Module"),
    (lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=0, num_attention_heads=2, vocab_size=64)), 2, {},
     r"'model': no decoder layer \(a module with self_attn"),
    (lambda: _with_attn(tiny_model(), **{"mlp.gate_proj": None}), 2, {},
     r"model.layers.1.mlp.gate_proj must be a torch.nn.Linear \(missing"),
    (lambda: _with_attn(tiny_model(), **{"self_attn.v_proj": torch.nn.Identity()}), 2, {},
     r"model.layers.1.self_attn.v_proj must be a torch.nn.Linear \(a Identity"),
    (lambda: _with_attn(tiny_model(), **{"self_attn.q_proj": _stand_in_weave_layer()}), 2, {},
     r"model.layers.1.self_attn.q_proj is already a weave layer \(swap a model once\)"),
    (lambda: _with_attn(tiny_model(), **{"self_attn.k_proj": torch.nn.Linear(256, 64, bias=False)}), 2, {},
     r"model.layers.1.self_attn.k_proj has 64 output features; the config's heads \(8, KV 4\) x head_dim \(32\) say "
     r"128"),
])
def test_the_plan_refuses_a_model_world_or_argument_by_name(make, world, kw, needle):
    with pytest.raises(weave.ArgumentError, match=needle):
        weave.hf.plan_tensor_parallel(make(), world, **kw)


def _stand_in_comm(world, rank=0):
    comm = object.__new__(weave.Communicator)
    comm._impl = type("Impl", (), {"world_size": world, "rank": rank, "device": 0})()
    return comm


def test_swap_to_weave_refuses_before_any_gpu_work_and_leaves_the_model_alone():
    model = tiny_model()
    q = model.model.layers[0].self_attn.q_proj
    with pytest.raises(weave.ArgumentError, match="'process_group': torch.distributed is not initialised"):
        weave.hf.swap_to_weave(model)
    with pytest.raises(weave.ArgumentError, match="'comm' and 'process_group': pass one of them, not both"):
        weave.hf.swap_to_weave(model, comm=_stand_in_comm(2), process_group=object())
    with pytest.raises(weave.ArgumentError, match="'comm': must be a weave.Communicator"):
        weave.hf.swap_to_weave(model, comm=object())
    with pytest.raises(weave.ArgumentError, match=r"num_attention_heads \(8\) must be divisible by the world \(16\)"):
        weave.hf.swap_to_weave(model, comm=_stand_in_comm(16))
    with pytest.raises(weave.ArgumentError, match=r"model.layers.0.self_attn.q_proj's weight is torch.float32 on cpu; "
                                                  r"weave's layers take bf16 .*model.to\('cuda:0', torch.bfloat16\)"):
        weave.hf.swap_to_weave(model, comm=_stand_in_comm(2), quant="ptpc")
    assert model.model.layers[0].self_attn.q_proj is q and model.config.num_attention_heads == 8


# --- the emulated world ------------------------------------------------------------------------

class AllReduce:
    """Every rank's tensor summed in fp32 in rank order, each rank the same sum (GemmAllReduce's
    rule): the rank threads meet at a barrier."""

    def __init__(self, world):
        self.barrier = threading.Barrier(world, timeout=120)
        self.parts = [None] * world

    def __call__(self, rank, x):
        self.parts[rank] = x
        self.barrier.wait()
        total = self.parts[0].float()
        for p in self.parts[1:]:
            total = total + p.float()
        self.barrier.wait()  # every rank has read the parts before the next call writes them
        return total


def product(x2, w, mode):
    """x2 @ w.T in fp32 from what weave's GEMM reads in `mode`: bf16 (or the fp32 model's) values,
    or e4m3 with ptpc's, blockscale's or mxfp8's scales (quant.py's quantisers), dequantised."""
    if mode == "bf16":
        return x2.float() @ w.float().T
    if mode == "ptpc":
        a, sa = quant.ptpc(x2.float())
        b, sb = quant.ptpc(w.float())
        return (a.float() * sa[:, None]) @ (b.float() * sb[:, None]).T
    quantise, dequantise, rows = {"blockscale": (quant.blockscale, quant.dequant_blockscale, 128),
                                  "mxfp8": (quant.mxfp8, quant.dequant_mx, 32)}[mode]
    a, b = quantise(x2.float(), 1), quantise(w.float(), rows)
    return dequantise(*a, 1) @ dequantise(*b, rows).T


class EmulatedLayer(torch.nn.Module):
    """weave.nn's ColumnParallelLinear (rows [r n/W, (r+1) n/W) of the weight) or RowParallelLinear
    (columns [r k/W, ...), the partial products, rounded to the activations' dtype, all-reduced)."""

    def __init__(self, entry, linear, rank, world, mode, all_reduce, shard=None):
        super().__init__()
        dim = 0 if entry.parallel == "column" else 1
        per = linear.weight.shape[dim] // world
        shard = rank if shard is None else shard
        self.weight = linear.weight.detach().narrow(dim, shard * per, per).clone()
        assert tuple(self.weight.shape) == entry.shard_shape, (entry.name, self.weight.shape, entry.shard_shape)
        self.parallel, self.rank, self.mode, self.all_reduce = entry.parallel, rank, mode, all_reduce

    def forward(self, x):
        y = product(x.reshape(-1, x.shape[-1]), self.weight, self.mode).to(x.dtype)
        if self.parallel == "row":
            y = self.all_reduce(self.rank, y).to(x.dtype)
        return y.reshape(*x.shape[:-1], self.weight.shape[0])


def run(model, ids, steps, tokens=None):
    """Logits of a prefill of ids and `steps` decode steps with HF's KV cache, feeding `tokens`
    (default: the model's own argmax); returns (logits per call, the tokens fed, the cache)."""
    out = model(ids, use_cache=True)
    logits, fed = [out.logits], []
    for i in range(steps):
        nxt = tokens[i] if tokens is not None else out.logits[:, -1:].argmax(-1)
        fed.append(nxt)
        out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
        logits.append(out.logits)
    return logits, fed, out.past_key_values


def emulated(ref, world, mode, ids, tokens, layer=EmulatedLayer):
    """Each rank's (logits, cache, model) of a copy of `ref` swapped by weave.hf._swap at `world`,
    its projections `layer`s, run in one thread per rank."""
    plan = weave.hf.plan_tensor_parallel(ref, world, quant=mode, max_tokens=ids.numel())
    all_reduce, results, errors = AllReduce(world), [None] * world, []

    def rank_body(rank):
        try:
            model = copy.deepcopy(ref)
            weave.hf._swap(model, plan, lambda entry, linear: layer(entry, linear, rank, world, mode, all_reduce))
            with torch.no_grad():
                logits, _, cache = run(model, ids, len(tokens), tokens)
            results[rank] = (logits, cache, model)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            all_reduce.barrier.abort()

    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def reference(ref, ids, steps):
    with torch.no_grad():
        logits, tokens, cache = run(ref, ids, steps)
    return logits, tokens, cache


@pytest.mark.parametrize("world", [1, 2, 4])
def test_an_emulated_world_of_swapped_layers_gives_the_whole_models_logits(world):
    """fp32 model, the emulated layers' exact products: prefill (2 sequences of 12 tokens) and 3
    decode steps equal the unmodified model's logits within fp32 rounding on every rank, every
    rank the same; each rank's config and KV cache hold its heads (KV heads / world)."""
    ref = tiny_model(seed=world)
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(world))
    want, tokens, ref_cache = reference(ref, ids, 3)
    ranks = emulated(ref, world, "bf16", ids, tokens)
    for rank, (logits, cache, model) in enumerate(ranks):
        for i, (got, w) in enumerate(zip(logits, want)):
            agree = weave.hf.logits_agreement(got, w)
            assert agree["rel_l2"] < 1e-5 and agree["argmax_agree"] == 1.0, (rank, i, agree)
            assert torch.equal(got, ranks[0][0][i]), f"rank {rank} call {i}: the ranks' logits differ"
        assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (8 // world, 4 // world)
        keys = cache.layers[0].keys
        assert tuple(keys.shape) == (2, 4 // world, 15, 32), keys.shape  # this rank's KV heads, 12 + 3 positions
        per = 4 // world  # rank r's KV heads are the whole model's [r per, (r + 1) per)
        assert torch.allclose(keys, ref_cache.layers[0].keys[:, rank * per:(rank + 1) * per], atol=1e-5)
    assert ref.config.num_attention_heads == 8, "the unmodified model's config is its own"


class Misaligned(EmulatedLayer):
    """A wrong mapping: column layers take the next rank's heads and features, row layers their own."""

    def __init__(self, entry, linear, rank, world, mode, all_reduce):
        shard = (rank + 1) % world if entry.parallel == "column" else rank
        super().__init__(entry, linear, rank, world, mode, all_reduce, shard)


class WithoutAllReduce(EmulatedLayer):
    """A wrong layer: the row-parallel ones keep their partial products."""

    def __init__(self, *args):
        super().__init__(*args)
        self.parallel = "column"


@pytest.mark.parametrize("wrong", [Misaligned, WithoutAllReduce])
def test_a_wrong_shard_or_a_missing_all_reduce_fails_even_the_fp8_bound(wrong):
    """The negative controls: the same emulated world, one thing wrong, moves the logits far outside
    every tolerance (relative L2 > 1.5 x fp8's bound), where the right one is within fp32 rounding."""
    ref = tiny_model(seed=7)
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(7))
    want, tokens, _ = reference(ref, ids, 1)
    ranks = emulated(ref, 2, "bf16", ids, tokens)
    assert weave.hf.logits_agreement(ranks[0][0][0], want[0])["rel_l2"] < 1e-5
    ranks = emulated(ref, 2, "bf16", ids, tokens, layer=wrong)
    assert weave.hf.logits_agreement(ranks[0][0][0], want[0])["rel_l2"] > 1.5 * weave.hf.TOLERANCE["ptpc"][0]


@pytest.mark.parametrize("mode", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_emulated_bf16_and_fp8_layers_are_within_the_stated_tolerance(mode):
    """A bf16 model at world 2 with the layers computing as weave's do (bf16 or e4m3 operands, fp32
    sums, bf16 out; the row-parallel partials bf16, summed in fp32): prefill and 4 decode steps
    within weave.hf.TOLERANCE[mode] of the unmodified bf16 model, and fp8 clearly outside bf16's
    bound (the bounds tell the modes apart)."""
    ref = tiny_model(seed=11, dtype=torch.bfloat16)
    ids = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(11))
    want, tokens, _ = reference(ref, ids, 4)
    (logits, _, _), _ = emulated(ref, 2, mode, ids, tokens)
    prefill = weave.hf.logits_agreement(logits[0], want[0])
    decode = weave.hf.logits_agreement(torch.cat(logits[1:], 1), torch.cat(want[1:], 1))
    for what, agree in (("prefill", prefill), ("decode", decode)):
        assert weave.hf.within_tolerance(agree, mode), (mode, what, agree, weave.hf.TOLERANCE[mode])
    if mode != "bf16":
        assert prefill["rel_l2"] > weave.hf.TOLERANCE["bf16"][0], prefill


def test_logits_agreement_numbers():
    want = torch.tensor([[3.0, 0.0, 0.0, -1.0], [0.0, 2.0, 1.0, 0.0]])
    got = want.clone()
    got[0, 3] += 0.5  # argmax unchanged
    got[1, 2] += 1.5  # argmax moves from 1 to 2
    agree = weave.hf.logits_agreement(got, want)
    rms = want.pow(2).mean().sqrt().item()
    assert agree["rel_l2"] == pytest.approx((0.25 + 2.25) ** 0.5 / want.norm().item())
    assert agree["max_abs_over_rms"] == pytest.approx(1.5 / rms)
    assert agree["argmax_agree"] == 0.5
    assert not weave.hf.within_tolerance(agree, "bf16")
    assert weave.hf.within_tolerance(weave.hf.logits_agreement(want, want), "ptpc")
    with pytest.raises(weave.ArgumentError, match="'got': shape"):
        weave.hf.logits_agreement(got[:1], want)
    with pytest.raises(weave.ArgumentError, match="'quant'"):
        weave.hf.within_tolerance(agree, "fp4")
