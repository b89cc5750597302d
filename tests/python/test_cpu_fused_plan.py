"""The fused operators' pure planners from Python (GemmAllReduce.plan_for, GemmAllGather.plan_for,
GemmReduceScatter.plan_for, AllGatherGemm.plan_for): no op, no GPU. They give the plan
`weave plan gemm-ar|gemm-ag|...` prints and refuse bad input naming the argument."""
import pytest

import weave


def test_all_reduce_plan_for_follows_m_and_the_machine():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    small, large = weave.GemmAllReduce.plan_for(1, **kw), weave.GemmAllReduce.plan_for(16384, **kw)
    assert small["mode"] != "fused" and large["mode"] == "fused", (small, large)
    # the planner's tile (docs/fused.md "The GEMM tile"): every row and column covered once
    assert large["tiles"] == (16384 // large["block_m"]) * -(-7168 // large["block_n"]), large
    assert large["grid"] == 132 and large["reason"]
    assert weave.GemmAllReduce.plan_for(16384, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    assert weave.GemmAllReduce.plan_for(16384, num_sms=66, **kw)["grid"] == 66


def test_all_reduce_plan_for_decode_fused_is_explicit():
    kw = dict(n=7168, k=2048, m_max=64, world=2)
    p = weave.GemmAllReduce.plan_for(8, mode="decode-fused", **kw)
    assert p["mode"] == "decode-fused" and "requested" in p["reason"], p
    assert weave.GemmAllReduce.plan_for(8, **kw)["mode"] != "decode-fused"  # never auto's choice
    assert weave.GemmAllReduce.plan_for(8, mode="decode-fused", **dict(kw, world=1))["mode"] == "decode"
    # the window holds the lines: 2 copies x world x 32 tokens x N x 4 bytes beyond mode decode's
    fused = weave.GemmAllReduce.window_bytes(mode="decode-fused", **kw)
    assert fused > 2 * 2 * 32 * 7168 * 4, fused
    with pytest.raises(ValueError, match="argument 'mode'"):
        weave.GemmReduceScatter.plan_for(8, mode="decode-fused", n=7168, k=2048, m_max=64, world=2)


def test_all_reduce_auto_takes_decode_fused_from_a_calibration_table(tmp_path):
    table = tmp_path / "gar.txt"
    table.write_text("weave-calibration 1\nop gemm-ar\nquant bf16\nn 7168\nk 2048\nworld 2\nwhere test\n"
                     "m 1 decode-fused\nm 8 decode-fused\nm 1024 split-lsa\n")
    kw = dict(n=7168, k=2048, m_max=1024, world=2)
    p = weave.GemmAllReduce.plan_for(8, calibration=str(table), **kw)
    assert p["mode"] == "decode-fused" and "calibration" in p["reason"], p
    assert weave.GemmAllReduce.plan_for(1024, calibration=str(table), **kw)["mode"] == "split-lsa"
    # the table's decode-fused rows make the auto op host the lines: 2 x world x 32 x N x 4 bytes
    plain = weave.GemmAllReduce.window_bytes(**kw)
    assert weave.GemmAllReduce.window_bytes(calibration=str(table), **kw) == plain + 2 * 2 * 32 * 7168 * 4


def test_all_gather_plan_for_follows_the_machine():
    kw = dict(n=2048, k=7168, m_max=8192, world=2)
    assert weave.GemmAllGather.plan_for(8192, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    p = weave.GemmAllGather.plan_for(8192, quant="ptpc", **kw)
    assert p["block_m"] in (64, 128, 256) and p["window_bytes"] > 0 and p["reason"]
    assert p["gemm_split_k"] == 1 and not p["gemm_gemv"], p  # whole tiles fill the SMs


def test_all_gather_split_modes_take_weave_gemms_k_split_or_gemv():
    # DeepSeek's wkv_a: 5 output tiles of K 7168 on 132 SMs: split-lsa's GEMM splits K as weave::Gemm
    # does, the decode rows run its GEMV; the fused mode runs its tile (it stores final tiles).
    kw = dict(n=576, k=7168, m_max=1024, world=2, quant="blockscale", out_dtype="bf16")
    p = weave.GemmAllGather.plan_for(32, **kw)
    assert p["mode"] == "split-lsa" and p["gemm_split_k"] > 1 and not p["gemm_gemv"], p
    assert "splits K" in p["reason"], p
    assert weave.GemmAllGather.plan_for(1, **kw)["gemm_gemv"]
    f = weave.GemmAllGather.plan_for(32, mode="fused-lsa", **kw)
    assert f["gemm_split_k"] == 1 and not f["gemm_gemv"], f


@pytest.mark.parametrize("bad, needle", [
    (dict(m=0), "argument 'm'"),  # Python's own check, before the planner's
    (dict(m=16385), "'m' must be in 1..m_max"),
    (dict(m=2**20), "got 1048576"),
    (dict(m=8, num_sms=0), "num_sms"),
    (dict(m=8, world=0), "world"),
    (dict(m=2.5), "argument 'm'"),
])
def test_plan_for_refuses_bad_input_naming_it(bad, needle):
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    kw.update(bad)
    m = kw.pop("m")
    with pytest.raises(weave.ArgumentError, match=needle.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        weave.GemmAllReduce.plan_for(m, **kw)


# GemmReduceScatter.plan_for: GemmAllReduce's planner without the gather leg. Rank r receives rows
# [r m/W, (r+1) m/W), so m must be a multiple of the world W, and fused's bands are whole tiles
# (m a multiple of W x 128, and of W x block_m for the tile a call runs).
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_reduce_scatter_plan_for_at_every_world(world):
    kw = dict(n=7168, k=2048, m_max=16384, world=world)
    p = weave.GemmReduceScatter.plan_for(16384, **kw)
    assert "bytes_ag" not in p and p["reason"]
    blocks = 16384 // p["block_m"]  # every rank computes a partial of every row
    assert p["tiles"] == blocks * -(-7168 // p["block_n"]), p
    assert p["bytes_rs"] == 16384 * 7168 * 2 * (world - 1) // world  # the peers' rows, bf16
    assert p["window_bytes"] == weave.GemmReduceScatter.window_bytes(**kw) > 0
    if world == 1:
        assert p["mode"] == "gemm-only" and "world 1" in p["reason"], p
    else:
        assert p["mode"] == "fused", p  # enough GEMM to hide the scatter under
        assert p["band_blocks"] == blocks // world and p["rounds"] == p["chunks"] + 1
    small = weave.GemmReduceScatter.plan_for(world, **kw)  # one row per rank
    assert small["mode"] == ("gemm-only" if world == 1 else "split-lsa"), small


def test_reduce_scatter_plan_for_modes_and_the_machine():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    for mode in ("gemm-only", "split-nccl", "split-lsa", "split-ce", "fused"):
        p = weave.GemmReduceScatter.plan_for(16384, mode=mode, **kw)
        assert p["mode"] == mode and f"mode {mode} requested" in p["reason"], p
    assert weave.GemmReduceScatter.plan_for(16384, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    assert weave.GemmReduceScatter.plan_for(16384, num_sms=66, **kw)["grid"] == 66
    assert weave.GemmReduceScatter.plan_for(16384, mode=weave.GemmReduceScatterMode.SPLIT_CE, **kw)["mode"] == "split-ce"
    # The same numbers GemmAllReduce's planner gives, less the gather leg.
    ar = weave.GemmAllReduce.plan_for(16384, mode="split-lsa", **kw)
    rs = weave.GemmReduceScatter.plan_for(16384, mode="split-lsa", **kw)
    assert rs["bytes_rs"] == ar["bytes_rs"] and ar["bytes_ag"] == ar["bytes_rs"] and rs["tiles"] == ar["tiles"]
    assert rs["model_comm_us"] < ar["model_comm_us"]


def test_reduce_scatter_plan_for_says_why_fused_cannot_run():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    m = 16384 - 2  # a multiple of the world, not of world x 128 = 256
    auto = weave.GemmReduceScatter.plan_for(m, **kw)
    assert auto["mode"] == "split-lsa", auto
    assert f"m = {m} is not a multiple of world x 128 = 256" in auto["reason"], auto["reason"]
    asked = weave.GemmReduceScatter.plan_for(m, mode="fused", **kw)
    assert asked["mode"] == "fused" and "cannot run m = 16382" in asked["reason"], asked["reason"]
    assert "world x 128 = 512" in weave.GemmReduceScatter.plan_for(16384 - 4, **dict(kw, world=4))["reason"]


@pytest.mark.parametrize("bad, needle", [
    (dict(m=3), "argument 'm' must be a multiple of the world (2), got 3"),
    (dict(m=6, world=4), "argument 'm' must be a multiple of the world (4), got 6"),
    (dict(m=0), "argument 'm'"),  # Python's own check, before the planner's
    (dict(m=16386), "'m' must be in 1..m_max"),
    (dict(m=8, num_sms=0), "num_sms"),
    (dict(m=8, world=0), "world"),
    (dict(m=8, mode="decode"), "argument 'mode': unknown mode 'decode' (one of: auto, gemm-only, split-nccl, "
                               "split-lsa, split-ce, fused)"),
    (dict(m=8, mode="fused-rs"), "argument 'mode': unknown mode 'fused-rs'"),
    (dict(m=8, m_max=1), "m_max must be >= the world (2)"),
    (dict(m=8, m_max=200, mode="fused"), "mode fused needs m_max >= world x 128 = 256"),
])
def test_reduce_scatter_plan_for_refuses_bad_input_naming_it(bad, needle):
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    kw.update(bad)
    m = kw.pop("m")
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmReduceScatter.plan_for(m, **kw)
    assert needle in str(e.value), str(e.value)


def test_all_gather_gemm_auto_takes_fused_ce_from_a_calibration_table(tmp_path):
    """auto runs per m the mode the table measured fastest (fused-ce or split-lsa), the model beyond
    its reach; a table naming fused-ce adds fused-ce's words to the window (never shrinks it)."""
    table = tmp_path / "agm.txt"
    table.write_text("weave-calibration 1\nop ag-gemm\nquant ptpc\nout bf16\nn 2048\nk 7168\nworld 2\nwhere test\n"
                     "m 64 fused-ce\nm 1024 split-lsa\n")
    kw = dict(n=2048, k=7168, m_max=8192, world=2, quant="ptpc")
    ce = weave.AllGatherGemm.plan_for(64, mode="fused-ce", **kw)
    p = weave.AllGatherGemm.plan_for(64, calibration=str(table), **kw)
    assert p["mode"] == "fused-ce" and "measured fastest near m = 64" in p["reason"], p  # the package builds ce in
    assert (p["block_m"], p["block_n"], p["gemm_kernel"]) == (ce["block_m"], ce["block_n"], ce["gemm_kernel"]), p
    assert weave.AllGatherGemm.plan_for(1024, calibration=str(table), **kw)["mode"] == "split-lsa"
    far = weave.AllGatherGemm.plan_for(8192, calibration=str(table), **kw)
    assert far["mode"] == "split-lsa" and "no row within 2x" in far["reason"], far
    assert weave.AllGatherGemm.plan_for(64, **kw)["mode"] == "split-lsa"  # no table: the model
    assert weave.AllGatherGemm.window_bytes(calibration=str(table), **kw) >= weave.AllGatherGemm.window_bytes(**kw)
    with pytest.raises(weave.ArgumentError) as e:
        weave.AllGatherGemm.plan_for(64, calibration=str(table), **{**kw, "k": 4096})
    assert "is for another op shape: k 7168 (this op: 4096)" in str(e.value), str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.AllGatherGemm.plan_for(64, calibration=str(table), mode="split-lsa", **kw)
    assert "only mode auto consults a calibration" in str(e.value), str(e.value)


# AllGatherGemm.plan_for: the gather of every rank's m rows of A (with their scales in the fp8
# modes), then one GEMM of world x m rows. auto: gemm-only at world 1, split-lsa in one NVLink
# domain, split-nccl across domains.
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_all_gather_gemm_plan_for_at_every_world(world):
    kw = dict(n=2048, k=7168, m_max=1024, world=world)
    p = weave.AllGatherGemm.plan_for(1000, **kw)
    rows = world * 1000
    # The GEMM is weave::Gemm's plan of the gathered rows (a tiled kernel at these sizes).
    assert p["rows"] == rows and p["gemm_kernel"].startswith("sm90_gemm_bf16") and p["gemm_reason"], p
    bm, bn = p["block_m"], p["block_n"]
    assert p["tiles"] == -(-rows // bm) * -(-2048 // bn) and 1 <= p["grid"] <= min(132, p["tiles"]), p
    assert p["reason"].endswith("GEMM " + p["gemm_kernel"]), p
    assert p["bytes_per_peer"] == 1000 * 7168 * 2  # this rank's bf16 rows, no scales
    assert p["window_bytes"] == weave.AllGatherGemm.window_bytes(**kw) > 0
    assert p["model_split_us"] == pytest.approx(p["model_gemm_us"] + p["model_comm_us"])
    if world == 1:
        assert p["mode"] == "gemm-only" and "world 1" in p["reason"] and p["model_comm_us"] == 0, p
        assert p["model_fused_us"] == 0, p  # nothing to pull
    else:
        assert p["mode"] == "split-lsa" and p["reason"] and p["model_comm_us"] > 0, p
        assert p["model_fused_us"] >= p["model_gemm_us"] > 0, p  # fused-ce's model, beside split's


@pytest.mark.parametrize("quant, row_bytes", [("bf16", 2 * 7168), ("ptpc", 7168 + 4),
                                              ("blockscale", 7168 + 4 * (7168 // 128)),
                                              ("mxfp8", 7168 + 7168 // 32)])
def test_all_gather_gemm_plan_for_moves_the_rows_as_the_gemm_reads_them(quant, row_bytes):
    """fp8 rows travel as e4m3 with their scales (ptpc one fp32 per row, blockscale K/128 fp32,
    mxfp8 K/32 ue8m0 bytes): about half bf16's bytes."""
    p = weave.AllGatherGemm.plan_for(333, n=2048, k=7168, m_max=1024, world=4, quant=quant)
    assert p["bytes_per_peer"] == 333 * row_bytes, p
    # The window holds world x m_max rows of A (and of their scales) and of the output.
    assert p["window_bytes"] >= 4 * 1024 * (row_bytes + 2048 * 2)


def test_all_gather_gemm_plan_for_modes_and_the_machine():
    kw = dict(n=2048, k=7168, m_max=1024, world=2)
    for mode in ("gemm-only", "split-nccl", "split-lsa", "split-ce", "fused-ce"):
        p = weave.AllGatherGemm.plan_for(512, mode=mode, **kw)
        assert p["mode"] == mode and f"mode {mode} requested" in p["reason"], p
    assert weave.AllGatherGemm.plan_for(512, mode=weave.AllGatherGemmMode.SPLIT_CE, **kw)["mode"] == "split-ce"
    assert weave.AllGatherGemm.plan_for(512, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    assert "no NCCL communicator" in weave.AllGatherGemm.plan_for(512, mode="split-nccl", nccl=False, **kw)["reason"]
    assert weave.AllGatherGemm.plan_for(1024, num_sms=66, **kw)["grid"] == 66
    # The GEMM is GemmAllGather's over world x m rows: the same tiles as GemmAllGather's of that many.
    ag = weave.GemmAllGather.plan_for(1024, n=2048, k=7168, m_max=1024, world=1)
    assert weave.AllGatherGemm.plan_for(512, **kw)["tiles"] == ag["tiles"]


# fused-ce: copy engines pull the peers' rows chunk by chunk while its own 128x128 GEMM runs (bf16,
# ptpc, blockscale with bf16 output); modelled beside split, never taken by auto.
@pytest.mark.parametrize("quant", ["bf16", "ptpc", "blockscale"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_all_gather_gemm_plan_for_fused_ce(quant, world):
    kw = dict(n=7168, k=4096, m_max=4096, world=world, quant=quant)
    p = weave.AllGatherGemm.plan_for(4096, mode="fused-ce", **kw)
    # its kernel runs the planner's tile over the world x m gathered rows (no K split)
    assert p["mode"] == "fused-ce" and p["block_m"] in (64, 128, 256) and p["block_n"] in (64, 128, 160, 256), p
    assert p["tiles"] == -(-world * 4096 // p["block_m"]) * -(-7168 // p["block_n"]), p
    assert f'{p["block_m"]}x{p["block_n"]}' in p["gemm_kernel"], p
    assert "chunks of" in p["reason"] and "fused-ce GEMM" in p["gemm_kernel"], p
    # The pulls hide under the GEMM: at this size well under the gather-then-GEMM.
    assert p["model_gemm_us"] <= p["model_fused_us"] < p["model_split_us"], p
    # auto models it too but, without a calibration table, takes split-lsa.
    a = weave.AllGatherGemm.plan_for(4096, **kw)
    assert a["mode"] == "split-lsa" and a["model_fused_us"] == pytest.approx(p["model_fused_us"]), a
    assert weave.AllGatherGemm.plan_for(4096, mode=weave.AllGatherGemmMode.FUSED_CE, **kw)["mode"] == "fused-ce"


def test_all_gather_gemm_plan_for_has_no_fused_time_where_fused_ce_cannot_run():
    kw = dict(n=2048, k=7168, m_max=1024)
    assert weave.AllGatherGemm.plan_for(512, world=1, **kw)["model_fused_us"] == 0
    assert weave.AllGatherGemm.plan_for(512, world=2, quant="mxfp8", **kw)["model_fused_us"] == 0
    assert weave.AllGatherGemm.plan_for(512, world=2, out_dtype="fp32", **kw)["model_fused_us"] == 0
    assert weave.AllGatherGemm.plan_for(512, world=2, **kw)["model_fused_us"] > 0


@pytest.mark.parametrize("bad, needle", [
    (dict(m=0), "argument 'm': must be an int >= 1"),  # Python's own check, before the planner's
    (dict(m=1025), "argument 'm' must be in 1..m_max (1024), got 1025"),
    (dict(m=2.5), "argument 'm': must be an int"),
    (dict(m=8, num_sms=0), "argument 'num_sms'"),
    (dict(m=8, world=0), "argument 'world'"),
    (dict(m=8, world=9), "world must be in 1..8, got 9"),
    (dict(m=8, mode="fused-lsa"), "argument 'mode': unknown mode 'fused-lsa' (one of: auto, gemm-only, split-nccl, "
                                  "split-lsa, split-ce, fused-ce)"),
    (dict(m=8, mode="fused-ce", quant="mxfp8"), "mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output "
                                               "(its GEMM reads A's scales as they land, without a pre-pass), got "
                                               "mxfp8 -> bf16"),
    (dict(m=8, mode="fused-ce", out_dtype="fp32"), "mode fused-ce runs quant bf16, ptpc and blockscale with bf16 "
                                                   "output"),
    (dict(m=8, quant="blockscale", scale_layout="mn-major"),
     "scale_layout must be raw: A's scales travel with their rows"),
    (dict(m=8, quant="mxfp8", scale_layout="packed"), "scale_layout must be raw"),
    (dict(m=8, quant="ptpc", out_dtype="fp32"), "produce bf16 output"),
    (dict(m=8, n=2050), "n must be a multiple of 8"),
])
def test_all_gather_gemm_plan_for_refuses_bad_input_naming_it(bad, needle):
    kw = dict(n=2048, k=7168, m_max=1024, world=2)
    kw.update(bad)
    m = kw.pop("m")
    with pytest.raises(weave.ArgumentError) as e:
        weave.AllGatherGemm.plan_for(m, **kw)
    assert needle in str(e.value), str(e.value)
