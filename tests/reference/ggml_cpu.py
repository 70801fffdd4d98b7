"""ggml's CPU arithmetic, emulated bit for bit in NumPy.

The reference model has to agree with ggml far more closely than float math does:
ggml rounds the inputs of f16 and quantized matmuls (to f16, to 8-bit quants) and of
GELU (an f16 table), and an input computed even an ulp off now and then lands on the
other side of such a rounding step, where one 8-bit quant moves the logits by far more
than the ulp did. So everything here follows ggml's own order of operations: its FMAs,
its summation orders, its exp, the C library's cosf/sinf/tanhf that it calls.

The formulas are those of the x86 build (AVX2 + FMA, no llamafile sgemm) of ggml 0.20
that ggspec links (libggml-python): ggml-cpu.c, vec.h, vec.cpp, ops.cpp,
simd-mappings.h, arch/x86/quants.c, ggml-quants.c. Against it, everything here is
bit-exact (checked op by op against that library, and on whole models against ggspec),
up to one known gap: the FMAs are emulated in float64, where the sum rounds twice (to
float64, then f32), which in rare ties differs from the hardware's single rounding.

* Matmuls. ggml_mul_mat(W, x) converts the f32 x to W's vec_dot_type (type_traits_cpu
  in ggml-cpu.c) before any dot product: F32 keeps f32, F16 rounds x to f16, Q4_0/Q5_0/
  Q8_0 quantize it to Q8_0, Q4_1/Q5_1 to Q8_1, Q4_K/Q6_K to Q8_K. dot_f32, dot_f16 and
  dot_quantized then follow ggml_vec_dot_f32, ggml_vec_dot_f16 and the ggml_vec_dot_*_q8_*
  kernels.
* soft_max is ggml_soft_max_ext, silu ggml_v_silu, gelu_f16_table GGML_GELU_FP16's lookup,
  v_expf ggml_v_expf; rope_cache and rope_rotate are ggml_rope_cache_init and rotate_pairs.
"""

import ctypes
import ctypes.util
import functools
from dataclasses import dataclass, fields, replace

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf import quants as quants_module

_SIMD_CHUNK = 32  # GGML_F32_STEP = GGML_F16_STEP on AVX: 4 accumulators of 8 lanes
_MAX_TEMP_ELEMENTS = 1 << 22  # bounds the [rows, n_out, 32] temporaries of the dot emulation
_Q8_BLOCK = 32  # QK8_0 and QK8_1
_Q8_K_BLOCK = 256  # QK_K


def fma(a, b, c) -> np.ndarray:
    """Fused multiply-add of f32 values: the product is exact in float64, the sum rounds
    to float64 and then to f32 (see the module's docstring)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def to_f16(x: np.ndarray) -> np.ndarray:
    """x rounded to f16, as float32. NumPy rounds to nearest even, as F16C's _cvtss_sh(x, 0)
    in GGML_CPU_FP32_TO_FP16 does."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _c_library_f32(name: str):
    """The C library's f32 function `name` (cosf, sinf, tanhf, expf), elementwise. ggml calls
    these, and glibc's results are not always the correctly rounded ones that float64 math
    rounded to f32 would give (tanhf differed for a quarter of the GELU table's inputs, cosf
    for ~0.5% of rope's angles)."""
    function = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name)
    function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.vectorize(function, otypes=[np.float32])


cosf, sinf, tanhf, c_expf, logf = (_c_library_f32(name) for name in ("cosf", "sinf", "tanhf", "expf", "logf"))


# --- quantized dot products ------------------------------------------------------------------
#
# ggml_mul_mat(W, x) with a quantized W first quantizes each row of the f32 x to W's
# vec_dot_type (type_traits_cpu in ggml-cpu.c): Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
# Q4_1/Q5_1, Q8_K for the K-quants. The x86 dot kernels then sum integer products
# exactly, into 8 lanes per block (lane k takes elements 4k..4k+3 of each 32), scale
# each lane's sum by the block's float scales with an FMA into 8 f32 accumulators, and
# add those up at the end (hsum_float_8), plus a per-type term for the block minimums.

_SUPPORTED_QUANTS = (T.Q4_0, T.Q5_0, T.Q8_0, T.Q4_1, T.Q5_1, T.Q4_K, T.Q6_K)
_Q8_1_WEIGHTS = (T.Q4_1, T.Q5_1)  # the others of the 32-blocks dot with Q8_0
_LANES = 8
_MAX_LANE_SUMS = 1 << 22  # bounds the [n_rows, n_out, n_in / 4] lane-sum temporaries


@dataclass(frozen=True)
class QuantizedWeight:
    """A quantized weight [n_out, n_in] in the terms of ggml's x86 dot kernel for its type.

    quants: what each activation quant is multiplied by, as integers in float32: the
        quant (Q4_0/Q5_0 offset to signed), for Q4_K its sub-block scale times the
        unsigned quant, for Q6_K its 16-element scale times the unsigned quant (0..63).
    d: the f16 scale of each block (32 elements, or 256 for the K-quants) [n_out, n_blocks].
    m: Q4_1/Q5_1's f16 block min; Q4_K's f16 dmin (else None).
    sub_mins: Q4_K's 6-bit min of each 32-element sub-block [n_out, n_blocks, 8].
    sub_scales: Q6_K's int8 scale of each 16 elements [n_out, n_blocks, 16].
    """

    type: T
    quants: np.ndarray
    d: np.ndarray
    m: np.ndarray | None = None
    sub_mins: np.ndarray | None = None
    sub_scales: np.ndarray | None = None

    @classmethod
    def from_gguf(cls, data: np.ndarray, weight_type: T) -> "QuantizedWeight":
        """From a tensor's raw bytes [n_out, bytes per row]. The integers come from gguf-py's
        dequantizer run on blocks whose f16 scales are set to 1 (and minimums to 0)."""
        if weight_type not in _SUPPORTED_QUANTS:
            raise NotImplementedError(f"matmul with {weight_type.name} weights is not supported by the reference")
        n_out = data.shape[0]
        blocks = np.asarray(data, dtype=np.uint8).reshape(n_out, -1, GGML_QUANT_SIZES[weight_type][1])
        # Byte offsets of the f16 fields: d, then the min (Q4_1/Q5_1 m, Q4_K dmin); Q6_K ends with d.
        d_at = 208 if weight_type == T.Q6_K else 0
        has_min = weight_type in _Q8_1_WEIGHTS or weight_type == T.Q4_K

        def f16_field(offset: int) -> np.ndarray:
            return np.ascontiguousarray(blocks[..., offset:offset + 2]).view(np.float16)[..., 0].astype(np.float32)

        unit_scales = blocks.copy()
        unit_scales[..., d_at:d_at + 2] = np.frombuffer(np.float16(1).tobytes(), np.uint8)
        if has_min:
            unit_scales[..., 2:4] = 0
        quants = quants_module.dequantize(unit_scales.reshape(n_out, -1), weight_type).astype(np.float32)
        d = f16_field(d_at)
        if weight_type == T.Q4_K:
            _, sub_mins = quants_module.Q4_K.get_scale_min(np.ascontiguousarray(blocks[..., 4:16]).reshape(-1, 12))
            return cls(weight_type, quants, d, m=f16_field(2),
                       sub_mins=sub_mins.reshape(n_out, -1, 8).astype(np.float32))
        if weight_type == T.Q6_K:
            sub_scales = np.ascontiguousarray(blocks[..., 192:208]).view(np.int8).astype(np.float32)
            # With d = 1 the dequantizer gives scale * (q - 32); the kernel multiplies the unsigned q.
            quants += 32 * np.repeat(sub_scales.reshape(n_out, -1), 16, axis=-1)
            return cls(weight_type, quants, d, sub_scales=sub_scales)
        return cls(weight_type, quants, d, m=f16_field(2) if has_min else None)

    def rows(self, start: int, stop: int) -> "QuantizedWeight":
        """Output rows start..stop-1 of the weight."""
        return replace(self, **{f.name: getattr(self, f.name)[start:stop] for f in fields(self)
                                if isinstance(getattr(self, f.name), np.ndarray)})


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """x [..., n] float32 as blocks [..., n / block, block]."""
    x = np.asarray(x, dtype=np.float32)
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def quantize_q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_row_q8_0 / q8_1 (x86 AVX path) of x [n_rows, n]: (quants [n_rows, n],
    d [n_rows, n / 32] as f16 values, Q8_1's block sum s = f16(d * sum(q)) likewise).

    d = amax / 127 in f32, stored as f16 (s takes the f32 d); the quants are
    rint(x * (127 / amax)), round-half-even like _mm256_round_ps.
    """
    blocks = _blocks(x, _Q8_BLOCK)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(amax > 0, np.float32(127) / amax, np.float32(0))
    quants = np.rint(blocks * inv_scale[..., None])
    d = amax / np.float32(127)
    s = to_f16(d * quants.sum(axis=-1, dtype=np.float32))
    return quants.reshape(np.shape(x)), to_f16(d), s


def quantize_q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_row_q8_K_ref (x86 uses it as is) of x [n_rows, n]: (quants [n_rows, n],
    d [n_rows, n / 256] f32, bsums [n_rows, n / 256, 16]: the sums of each 16 quants).

    The scale comes from the signed element of largest magnitude (the first such), as
    iscale = -127 / max; quants are min(127, rint(iscale * x)) (nearest_int rounds half
    to even) and d = 1 / iscale. An all-zero block gets d = 0.
    """
    blocks = _blocks(x, _Q8_K_BLOCK)
    first_largest = np.abs(blocks).argmax(axis=-1)[..., None]
    signed_max = np.take_along_axis(blocks, first_largest, axis=-1)[..., 0]
    nonzero = signed_max != 0
    with np.errstate(divide="ignore", invalid="ignore"):  # all-zero blocks, replaced below
        iscale = np.float32(-127) / signed_max
        d = np.where(nonzero, np.float32(1) / iscale, np.float32(0))
        quants = np.where(nonzero[..., None], np.minimum(np.rint(iscale[..., None] * blocks), np.float32(127)),
                          np.float32(0))
    bsums = quants.reshape(*quants.shape[:-1], 16, 16).sum(axis=-1)
    return quants.reshape(np.shape(x)), d, bsums


def _lane_sums(w_quants: np.ndarray, x_quants: np.ndarray) -> np.ndarray:
    """Integer dot products of each 4 consecutive elements of w [n_out, n] and x [n_rows, n],
    block-major: [n / 32, n_rows, n_out, 8] (lane k of a 32-block holds elements 4k..4k+3).
    In float32, exactly: all of it stays below 2^24."""
    n_rows, (n_out, n) = x_quants.shape[0], w_quants.shape
    groups = np.matmul(x_quants.reshape(n_rows, n // 4, 4).transpose(1, 0, 2),
                       w_quants.reshape(n_out, n // 4, 4).transpose(1, 2, 0))  # [n / 4, n_rows, n_out]
    blocks = groups.reshape(n // _SIMD_CHUNK, _LANES, n_rows, n_out)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 1))


def _hsum_8(acc: np.ndarray) -> np.ndarray:
    """hsum_float_8 over the last axis (8): halves added, then pairs of what is left."""
    quad = acc[..., 4:] + acc[..., :4]
    return (quad[..., 0] + quad[..., 2]) + (quad[..., 1] + quad[..., 3])


def _accumulate(scales: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """acc = fma(scales[b], lanes[b], acc) for block b = 0, 1, ...: scales [n_blocks, ...]
    and lanes [n_blocks, ..., n_lanes] (f32) -> [..., n_lanes]. The products are exact
    in float64, so each FMA is a float64 sum and its rounding, as in fma()."""
    products = scales.astype(np.float64)[..., None] * lanes
    acc = np.zeros(products.shape[1:], np.float32)
    for block_products in products:
        acc = (block_products + acc).astype(np.float32)
    return acc


def _block_scales(x_d: np.ndarray, w_d: np.ndarray) -> np.ndarray:
    """The f32 products x_d [n_rows, n_blocks] * w_d [n_out, n_blocks], as [n_blocks, n_rows, n_out]."""
    return x_d.T[:, :, None] * w_d.T[:, None, :]


def _dot_32_blocks(w: QuantizedWeight, x: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_{q4_0,q5_0,q8_0}_q8_0 and {q4_1,q5_1}_q8_1, [n_rows, n_out]."""
    x_quants, x_d, x_s = quantize_q8_0(x)
    result = _hsum_8(_accumulate(_block_scales(x_d, w.d), _lane_sums(w.quants, x_quants)))
    if w.m is not None:  # summs += m * s, block after block, in f32 (the products are exact)
        summs = np.zeros_like(result)
        for min_term in _block_scales(x_s, w.m):
            summs = summs + min_term
        result = result + summs
    return result


def _dot_k_quants(w: QuantizedWeight, x: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_q4_K_q8_K and ggml_vec_dot_q6_K_q8_K, [n_rows, n_out].

    Each lane sums its integers over the 8 sub-blocks of 32 of a 256-block. Q6_K takes
    32 * scale * (sum of 16 quants) off lane k for the 16-groups 2k and 2k+1 (the
    quants' -32 offset). Q4_K accumulates its min term in 4 more f32 lanes, lane p with
    the mins of sub-blocks 2p and 2p+1 times their quant sums, scaled by -d_x * dmin.
    """
    x_quants, x_d, bsums = quantize_q8_k(x)
    n_rows, (n_out, n_blocks) = x_quants.shape[0], w.d.shape
    lanes = _lane_sums(w.quants, x_quants).astype(np.float64)
    lanes = lanes.reshape(n_blocks, _Q8_K_BLOCK // _SIMD_CHUNK, n_rows, n_out, _LANES).sum(axis=1)
    if w.type == T.Q6_K:
        lanes -= 32 * np.einsum("obkj,tbkj->btok", w.sub_scales.reshape(n_out, n_blocks, _LANES, 2),
                                bsums.reshape(n_rows, n_blocks, _LANES, 2), dtype=np.float64)
    # int32 -> f32 (_mm256_cvtepi32_ps) rounds to nearest even, as float64 -> f32 does.
    result = _hsum_8(_accumulate(_block_scales(x_d, w.d), lanes.astype(np.float32)))
    if w.type == T.Q4_K:
        sub_sums = bsums.reshape(n_rows, n_blocks, 4, 2, 2).sum(axis=-1)  # 32-sums, in pairs of sub-blocks
        min_lanes = np.einsum("obpj,tbpj->btop", w.sub_mins.reshape(n_out, n_blocks, 4, 2), sub_sums,
                              dtype=np.float64).astype(np.float32)
        acc_m = _accumulate(_block_scales(-x_d, w.m), min_lanes)
        result = result + ((acc_m[..., 0] + acc_m[..., 2]) + (acc_m[..., 1] + acc_m[..., 3]))
    return result


def dot_quantized(w: QuantizedWeight, x: np.ndarray) -> np.ndarray:
    """ggml_mul_mat(W, x) for a quantized W and f32 x [n_rows, n_in] -> [n_rows, n_out],
    bit-exact, a slice of W's rows at a time."""
    x = np.asarray(x, dtype=np.float32)
    dot = _dot_k_quants if w.type in (T.Q4_K, T.Q6_K) else _dot_32_blocks
    n_out, n_in = w.quants.shape
    rows_per_step = max(1, _MAX_LANE_SUMS // (x.shape[0] * n_in // 4))
    return np.concatenate([dot(w.rows(i, i + rows_per_step), x) for i in range(0, n_out, rows_per_step)], axis=-1)


# --- f32 and f16 dot products -------------------------------------------------------------


def _reduce_accumulators(acc: np.ndarray) -> np.ndarray:
    """GGML_F32x8_REDUCE of the 4 x 8 lanes acc [..., 32] -> [...]: the accumulators
    pairwise (0+2, 1+3, then the two), then the 8 lanes: halves, then pairs (hadd)."""
    acc = acc.reshape(*acc.shape[:-1], 4, 8)
    lanes = (acc[..., 0, :] + acc[..., 2, :]) + (acc[..., 1, :] + acc[..., 3, :])
    quad = lanes[..., :4] + lanes[..., 4:]
    return (quad[..., 0] + quad[..., 1]) + (quad[..., 2] + quad[..., 3])


def _dot(w: np.ndarray, x: np.ndarray, exact_products: bool) -> np.ndarray:
    """w [..., n_out, n] . x [..., n_rows, n] -> [..., n_rows, n_out], a few rows at a time."""
    rows_per_step = max(1, _MAX_TEMP_ELEMENTS // (w.size // w.shape[-1] * _SIMD_CHUNK))
    return np.concatenate([_dot_rows(w, x[..., i:i + rows_per_step, :], exact_products)
                           for i in range(0, x.shape[-2], rows_per_step)], axis=-2)


def _dot_rows(w: np.ndarray, x: np.ndarray, exact_products: bool) -> np.ndarray:
    n = w.shape[-1]
    n_simd = n - n % _SIMD_CHUNK
    w, x = w[..., None, :, :], x[..., :, None, :]  # broadcast to [..., n_rows, n_out, n]
    acc = np.zeros(np.broadcast_shapes(w.shape[:-1], x.shape[:-1]) + (_SIMD_CHUNK,), np.float32)
    # Each step is an FMA, rounding once: products of two f16 are exact in f32, and those of
    # two f32 in float64 (then rounding the float64 sum, as fma() does).
    w_exact, x_exact = (w, x) if exact_products else (w.astype(np.float64), x.astype(np.float64))
    for i in range(0, n_simd, _SIMD_CHUNK):
        chunk = np.s_[..., i:i + _SIMD_CHUNK]
        acc = (x_exact[chunk] * w_exact[chunk] + acc).astype(np.float32)
    result = _reduce_accumulators(acc)
    # The scalar tail: ggml_vec_dot_f16 sums it in double, ggml_vec_dot_f32 in f32 (unfused).
    if exact_products:
        result = result.astype(np.float64)
    for i in range(n_simd, n):
        result = result + x[..., i] * w[..., i]
    return result.astype(np.float32)


def dot_f32(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ggml_mul_mat of f32 w [..., n_out, n] and x [..., n_rows, n] -> [..., n_rows, n_out]:
    ggml_vec_dot_f32 per output, bit-exact. Leading dims broadcast (ggml's heads)."""
    return _dot(np.asarray(w, np.float32), np.asarray(x, np.float32), exact_products=False)


def dot_f16(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """As dot_f32, for w and x holding f16 values (as float32): ggml_vec_dot_f16."""
    return _dot(np.asarray(w, np.float32), np.asarray(x, np.float32), exact_products=True)


# --- elementwise ops ------------------------------------------------------------------------


def _hex32(literal: str) -> np.float32:
    return np.float32(float.fromhex(literal))


@np.errstate(over="ignore", under="ignore", invalid="ignore")  # -inf and the unused branches
def v_expf(x: np.ndarray) -> np.ndarray:
    """ggml_v_expf (AVX2 + FMA), elementwise: ggml's own f32 exp, within ~1.5 ulp of exp."""
    x = np.asarray(x, dtype=np.float32)
    shifter = _hex32("0x1.8p23")
    z = fma(x, _hex32("0x1.715476p+0"), shifter)  # x / ln 2, rounded to an integer n in z's low bits
    n = z - shifter
    b = fma(-n, _hex32("0x1.7f7d1cp-20"), fma(-n, _hex32("0x1.62e4p-1"), x))  # x - n ln 2
    e = z.view(np.uint32) << np.uint32(23)  # n in the exponent bits
    k = (e + np.float32(1).view(np.uint32)).view(np.float32)  # 2^n
    u = b * b
    j = fma(fma(fma(_hex32("0x1.0e4020p-7"), b, _hex32("0x1.573e2ep-5")), u,
                fma(_hex32("0x1.555e66p-3"), b, _hex32("0x1.fffdb6p-2"))),
            u, _hex32("0x1.ffffecp-1") * b)  # exp(b) - 1
    # Beyond |n| > 126, 2^n is split into two factors (s1, s2), or under/overflows past 192.
    g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0))
    s1 = (g + np.uint32(0x7F000000)).view(np.float32)
    s2 = (e - g).view(np.float32)
    large = np.where(np.abs(n) > 192, s1 * s1, fma(s2, j, s2) * s1)
    return np.where(np.abs(n) > 126, large, fma(k, j, k))


def silu(x: np.ndarray) -> np.ndarray:
    """ggml_vec_silu_f32 / ggml_vec_swiglu_f32 over the last axis: x / (1 + exp(-x)) with
    ggml_v_expf, 8 at a time; the scalar tail (lengths not a multiple of 8) uses C's expf."""
    x = np.asarray(x, dtype=np.float32)
    n_simd = x.shape[-1] - x.shape[-1] % 8
    exp_neg = np.concatenate([v_expf(-x[..., :n_simd]), c_expf(-x[..., n_simd:])], axis=-1)
    return x / (np.float32(1) + exp_neg)


def soft_max(scores: np.ndarray, scale: np.float32, masked: np.ndarray) -> np.ndarray:
    """ggml_soft_max_ext over the last axis (a multiple of 8 long): scores * scale, masked
    entries -inf, then v_expf(x - max) divided by their sum.

    The sum is ggml_vec_soft_max_f32's: each 8 values summed in f32 as an AVX register
    (halves, then pairs), those sums added in double; the inverse is applied in f32.
    """
    x = np.where(masked, np.float32(-np.inf), np.asarray(scores, np.float32) * scale)
    e = v_expf(x - x.max(axis=-1, keepdims=True))
    groups = e.reshape(*e.shape[:-1], -1, 8)
    quad = groups[..., 4:] + groups[..., :4]
    sums = ((quad[..., 0] + quad[..., 2]) + (quad[..., 1] + quad[..., 3])).sum(axis=-1, keepdims=True, dtype=np.float64)
    return e * (1.0 / sums).astype(np.float32)


@functools.cache
def _gelu_table() -> np.ndarray:
    """ggml_table_gelu_f16, indexed by the bits of an f16: f16(ggml_gelu_f32(that f16)), where
    ggml_gelu_f32(x) = 0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x))) as the
    x86 build compiles it: 1.0f + (GELU_COEF_A*x)*x fused into one FMA."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    x = np.where(np.isfinite(x), x, np.float32(0))  # never looked up
    half, one = np.float32(0.5), np.float32(1)
    sqrt_2_over_pi, coef_a = np.float32(0.79788456080286535587989211986876), np.float32(0.044715)
    gelu = half * x * (one + tanhf(sqrt_2_over_pi * x * fma(coef_a * x, x, one)))
    return gelu.astype(np.float16).astype(np.float32)


def gelu_f16_table(x: np.ndarray) -> np.ndarray:
    """ggml_vec_gelu_f32 / ggml_vec_geglu_f32 with GGML_GELU_FP16, as float32: inside
    (-10, 10) the table entry of f16(x); at or below -10 it is 0, at or above 10 it is x."""
    x = np.asarray(x, dtype=np.float32)
    inside = np.abs(x) < 10
    table_value = _gelu_table()[np.where(inside, x, np.float32(0)).astype(np.float16).view(np.uint16)]
    return np.where(inside, table_value, np.where(x >= 10, x, np.float32(0)))


# --- rope -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Yarn:
    """ggml_rope_ext's YaRN arguments: ext_factor 0 turns it off; attn_factor multiplies
    every cos and sin either way."""
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    n_ctx_orig: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0


_NO_YARN = Yarn()


def _yarn_corr_dims(n_rot: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float):
    """ggml_rope_yarn_corr_dims: the pair range over which YaRN ramps from interpolation
    to extrapolation, in f32."""
    f = np.float32

    def corr_dim(beta: float) -> np.float32:
        turns = f(n_ctx_orig) / (f(beta) * f(2) * f(np.pi))
        return f(n_rot) * logf(turns) / (f(2) * logf(f(freq_base)))

    start, end = np.floor(corr_dim(beta_fast)), np.ceil(corr_dim(beta_slow))
    return f(max(0.0, start)), f(min(n_rot - 1, end))


@functools.cache
def rope_cache(n_pos: int, n_rot: int, freq_base: float, freq_scale: float,
               freq_factors: tuple[float, ...] | None = None, yarn: Yarn = _NO_YARN) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) [n_pos, n_rot / 2] of ggml_rope_cache_init at positions 0..n_pos-1: pair i's
    extrapolated angle is pos * theta_scale^i / freq_factors[i], the power taken as one f32
    multiply per pair (theta_scale = powf(freq_base, -2/n_rot)), so its rounding grows with
    i; scaled by freq_scale, or with YaRN mixed with the unscaled angle by the ramp between
    the correction dims, and the magnitude multiplied by attn_factor (times
    1 + 0.1 ln(1/freq_scale) with YaRN), in ggml's order with its fused multiply-adds.
    Read-only, as it is cached.
    """
    f = np.float32
    theta_scale = f(freq_base) ** (f(-2) / f(n_rot))
    theta = np.empty((n_pos, n_rot // 2), dtype=np.float32)
    theta[:, 0] = np.arange(n_pos, dtype=np.float32)
    for i in range(1, n_rot // 2):
        theta[:, i] = theta[:, i - 1] * theta_scale
    if freq_factors is not None:
        theta = theta / np.asarray(freq_factors, np.float32)[: n_rot // 2]
    interpolated = theta * f(freq_scale)
    mscale = f(yarn.attn_factor)
    if yarn.ext_factor != 0.0:
        low, high = _yarn_corr_dims(n_rot, yarn.n_ctx_orig, freq_base, yarn.beta_fast, yarn.beta_slow)
        y = (np.arange(n_rot // 2, dtype=np.float32) - low) / max(f(0.001), f(high - low))
        mix = (f(1) - np.minimum(f(1), np.maximum(f(0), y))) * f(yarn.ext_factor)
        interpolated = fma(interpolated, f(1) - mix, theta * mix)
        mscale = mscale * fma(f(0.1), logf(f(1) / f(freq_scale)), f(1))
    cos, sin = cosf(interpolated), sinf(interpolated)
    if mscale != 1:
        cos, sin = cos * mscale, sin * mscale
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rope_rotate(x0: np.ndarray, x1: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rotate_pairs: (x0 cos - x1 sin, x0 sin + x1 cos), as compiled: the x1 product
    rounded, the x0 product fused into the add."""
    return fma(x0, cos, -(x1 * sin)), fma(x0, sin, x1 * cos)
