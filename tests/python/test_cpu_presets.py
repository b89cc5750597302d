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
