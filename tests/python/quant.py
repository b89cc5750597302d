"""Quantisers and references written with torch alone (not weave's code): the operands each mode
reads, their dequantised values, and fp32 references."""
import torch

E4M3_MAX = 448.0


def e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def ptpc(x: torch.Tensor):
    """Per-row fp32 scale amax / 448 (zero rows: 1); returns (e4m3 [R, K], scale [R])."""
    amax = x.abs().amax(dim=1).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return e4m3(x / scale[:, None]), scale


def blockscale(x: torch.Tensor, rows_per_block: int):
    """Scale per rows_per_block x 128 block (1 for A, 128 for B); returns (e4m3, scale
    [ceil(R / rows_per_block), K / 128] row-major)."""
    r, k = x.shape
    rb = (r + rows_per_block - 1) // rows_per_block
    pad = torch.zeros(rb * rows_per_block, k, dtype=x.dtype, device=x.device)
    pad[:r] = x
    blocks = pad.view(rb, rows_per_block, k // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3)).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    full = scale.repeat_interleave(rows_per_block, 0)[:r].repeat_interleave(128, 1)
    return e4m3(x / full), scale.contiguous()


def dequant_blockscale(q: torch.Tensor, scale: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    r = q.shape[0]
    return q.float() * scale.repeat_interleave(rows_per_block, 0)[:r].repeat_interleave(128, 1)


def mxfp8(x: torch.Tensor, rows_per_block: int):
    """OCP MX: per rows_per_block x 32 block, shared exponent floor(log2(amax)) - 8, stored as the
    ue8m0 byte e + 127; returns (e4m3, uint8 scale bytes [ceil(R / rows_per_block), K / 32])."""
    r, k = x.shape
    rb = (r + rows_per_block - 1) // rows_per_block
    pad = torch.zeros(rb * rows_per_block, k, dtype=torch.float32, device=x.device)
    pad[:r] = x.float()
    amax = pad.view(rb, rows_per_block, k // 32, 32).abs().amax(dim=(1, 3))
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 8, torch.full_like(amax, -127)).clamp(-127, 127)
    byte = (exp + 127).to(torch.uint8)
    full = torch.exp2(exp).repeat_interleave(rows_per_block, 0)[:r].repeat_interleave(32, 1)
    return e4m3(x.float() / full), byte.contiguous()


def dequant_mx(q: torch.Tensor, byte: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    r = q.shape[0]
    scale = torch.exp2(byte.float() - 127)
    return q.float() * scale.repeat_interleave(rows_per_block, 0)[:r].repeat_interleave(32, 1)


def pack_mx_reference(byte: torch.Tensor) -> torch.Tensor:
    """The packed layout of include/weave/quant.hpp, from its definition: word (s, r) holds the
    bytes of K groups 4s..4s+3 of row r, group 4s lowest; groups past K/32 are 127."""
    rows, groups = byte.shape
    words = (groups + 3) // 4
    pad = torch.full((rows, words * 4), 127, dtype=torch.int64)
    pad[:, :groups] = byte.cpu().to(torch.int64)
    p = pad.view(rows, words, 4)
    w = p[..., 0] | (p[..., 1] << 8) | (p[..., 2] << 16) | (p[..., 3] << 24)
    w = torch.where(w >= (1 << 31), w - (1 << 32), w)
    return w.t().contiguous().to(torch.int32)
