"""weave.presets() / weave.preset(): the library's preset table from Python, without a GPU. The
expected N and K are the models' config.json values written out here, not read back from weave."""
import subprocess
import shutil

import pytest

import weave

# name -> (op, N, K) from the configs (DeepSeek-V3, Llama-3-70B, Qwen3-32B) and, for DeepSeek-V4,
# the reference operator's measured wkv_gate shapes.
EXPECTED = {
    "deepseek-v3.o_proj": ("gemm-ar", 7168, 128 * 128),
    "deepseek-v3.down_proj": ("gemm-ar", 7168, 18432),
    "deepseek-v3.shared_down_proj": ("gemm-ar", 7168, 2048),
    "deepseek-v3.wkv_a": ("gemm-ag", 512 + 64, 7168),
    "deepseek-v4-pro.wkv_gate": ("gemm-ag", 2048, 7168),
    "deepseek-v4.1-flash.wkv_gate": ("gemm-ag", 1024, 5120),
    "llama3-70b.o_proj": ("gemm-ar", 8192, 64 * 128),
    "llama3-70b.down_proj": ("gemm-ar", 8192, 28672),
    "qwen3-32b.o_proj": ("gemm-ar", 5120, 64 * 128),
    "qwen3-32b.down_proj": ("gemm-ar", 5120, 25600),
}


def test_presets_are_the_models_layers():
    ps = weave.presets()
    assert sorted(p.name for p in ps) == sorted(EXPECTED)
    for p in ps:
        assert isinstance(p, weave.Preset)
        assert (p.op, p.n, p.k) == EXPECTED[p.name], p.name
        assert p.quants and p.ms and p.summary and p.source
        assert p.out in ("bf16", "fp32")


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_every_preset_shards_in_every_quant_it_ships(world):
    for p in weave.presets():
        for q in p.quants:
            s = weave.preset(p.name, world=world, quant=q)
            assert (s.world, s.quant, s.n, s.preset) == (world, q, p.n, p)
            if p.op == "gemm-ar":
                assert s.k * world == p.k
                assert q != "blockscale" or s.k % 128 == 0
            else:
                assert s.k == p.k


def test_default_quant_is_the_first_shipped_and_op_kwargs_fit_the_ops():
    s = weave.preset("deepseek-v3.o_proj", world=8)
    assert (s.quant, s.n, s.k) == ("blockscale", 7168, 2048)
    kw = s.op_kwargs()
    assert kw == {"n": 7168, "k": 2048, "quant": "blockscale"}
    assert weave.GemmAllReduce.validate(m_max=8192, world=8, **kw) == ""
    g = weave.preset("deepseek-v4-pro.wkv_gate", world=8).op_kwargs()
    assert g == {"n": 2048, "k": 7168, "quant": "bf16", "out_dtype": "fp32"}
    assert weave.GemmAllGather.validate(m_max=2048, world=8, **g) == ""


def test_a_world_that_does_not_divide_k_names_the_preset_the_world_and_the_rule():
    with pytest.raises(weave.ArgumentError) as e:
        weave.preset("deepseek-v3.o_proj", world=3)
    assert "deepseek-v3.o_proj at world 3: K = 16384 is not divisible by 3" in str(e.value)
    with pytest.raises(weave.ArgumentError, match="world must be in 1..8"):
        weave.preset("llama3-70b.o_proj", world=16)
    with pytest.raises(weave.ArgumentError, match="world"):
        weave.preset("llama3-70b.o_proj", world="2")


def test_a_quant_the_model_does_not_ship_and_an_unknown_name_are_refused():
    with pytest.raises(weave.ArgumentError, match=r"quant mxfp8 is not one the model ships \(bf16, ptpc\)"):
        weave.preset("llama3-70b.down_proj", world=2, quant="mxfp8")
    with pytest.raises(weave.ArgumentError, match="quant 'fp4'"):
        weave.preset("llama3-70b.down_proj", world=2, quant="fp4")
    with pytest.raises(weave.ArgumentError, match="preset 'llama3-70b.qkv': no such preset"):
        weave.preset("llama3-70b.qkv")


def test_the_cli_lists_the_same_table():
    cli = shutil.which("weave")
    if cli is None:
        pytest.skip("the weave CLI is not on PATH (it is built by CMake, not by pip)")
    out = subprocess.run([cli, "plan", "--presets"], capture_output=True, text=True, check=True).stdout
    for p in weave.presets():
        assert p.name in out and p.source in out


# Decoder layers: (GEMM, split, N, K) from the same configs, in decode order.
LAYERS = {
    "llama3-70b": [("qkv_proj", "column", (64 + 2 * 8) * 128, 8192), ("o_proj", "row", 8192, 64 * 128),
                   ("gate_up_proj", "column", 2 * 28672, 8192), ("down_proj", "row", 8192, 28672)],
    "qwen3-32b": [("qkv_proj", "column", (64 + 2 * 8) * 128, 5120), ("o_proj", "row", 5120, 64 * 128),
                  ("gate_up_proj", "column", 2 * 25600, 5120), ("down_proj", "row", 5120, 25600)],
    "deepseek-v3": [("qkv_a_proj", "replicated", 1536 + 512 + 64, 7168), ("q_b_proj", "column", 128 * 192, 1536),
                    ("o_proj", "row", 7168, 128 * 128), ("gate_up_proj", "column", 2 * 18432, 7168),
                    ("down_proj", "row", 7168, 18432)],
}


def test_layer_presets_are_the_models_decoder_layers():
    layers = weave.layer_presets()
    assert [lp.name for lp in layers] == list(LAYERS)
    for lp in layers:
        assert isinstance(lp, weave.LayerPreset)
        assert [(g.name, g.split, g.n, g.k) for g in lp.gemms] == LAYERS[lp.name]
        assert lp.quants and lp.ms == (1, 2, 4, 8, 16, 32) and lp.summary
        assert all(g.source for g in lp.gemms)
    assert "kv_b_proj" in layers[2].left_out


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_every_layer_shards_by_its_splits(world):
    for lp in weave.layer_presets():
        for q in lp.quants:
            s = weave.layer_preset(lp.name, world=world, quant=q)
            assert (s.world, s.quant, s.preset) == (world, q, lp)
            for whole, shard in zip(lp.gemms, s.gemms):
                n = whole.n // world if whole.split == "column" else whole.n
                k = whole.k // world if whole.split == "row" else whole.k
                assert (shard.name, shard.split, shard.n, shard.k) == (whole.name, whole.split, n, k)


def test_a_layer_that_does_not_shard_names_the_gemm_the_world_and_the_rule():
    with pytest.raises(weave.ArgumentError) as e:
        weave.layer_preset("llama3-70b", world=3)
    assert "llama3-70b.qkv_proj at world 3: 8 units" in str(e.value)
    with pytest.raises(weave.ArgumentError, match=r"quant blockscale is not one the model ships \(bf16, ptpc\)"):
        weave.layer_preset("llama3-70b", world=2, quant="blockscale")
    with pytest.raises(weave.ArgumentError, match="layer preset 'llama3-8b': no such layer"):
        weave.layer_preset("llama3-8b")
    with pytest.raises(weave.ArgumentError, match="world"):
        weave.layer_preset("llama3-70b", world=2.0)
    assert weave.layer_preset("deepseek-v3", world=8).quant == "blockscale"  # the model's first
