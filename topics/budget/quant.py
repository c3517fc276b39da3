"""Quantized caches: the newest `budget` positions in full precision, every older one stored in fewer bits.

    fp8    e4m3 (1 byte), one scale per layer for K and one for V, calibrated on the prefill (max |x| / 448 over
           every prompt position, the rule of transformers' Fp8QuantizedLayer, which freezes its scale on its first
           update) and then frozen: a row decoded later whose numbers pass ±448·scale saturates there, as in
           transformers (tests/test_budget.py checks the codec, and the round-trip error at B >= 128, against
           transformers' own layer). vLLM differs: its fp8 KV cache takes the scale from the checkpoint (1.0 when
           there is none), and its computed scales leave headroom (max / 200 for keys, max / 100 for values)
    int8   KIVI (arXiv:2402.02750): asymmetric integers, keys with one scale and zero point per channel over a
    int4   group of GROUP positions (outlier channels keep their own range), values one per position (each
           token's row its own range); scales and zero points in fp16, two int4 codes packed in a byte

A pass attends to full precision for what it just fed: the new rows join the full-precision tail, the pass reads
the dequantized older rows plus that tail, and only then the oldest rows of the tail (whole groups for KIVI) are
quantized, once, and never re-quantized. With a budget at least as long as the sequence nothing is ever quantized.
transformers' own QuantizedCache quantizes the whole prompt at once and keeps a residual only for decoded rows;
here the budget is one knob for both kinds of policy: B positions in full precision, the rest rounded or dropped.

What a step costs: every pass dequantizes every older row into a full-precision copy (`update`), which attention
then reads. So this implementation moves more bytes a step than the full cache (the packed rows, the copy written,
the copy read), and `dequant_ms` measures the time it spends doing so. A fused kernel (KIVI's, vLLM's fp8 attention)
reads the packed bytes inside attention instead: there, fewer bytes held is fewer bytes read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.timing import span
from engine.transformers_internals import OwnLayer

GROUP = 16  # KIVI's key group along the positions (the paper uses 32 or 128 on 7B models)
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
SCALE_DTYPE = torch.float16  # KIVI keeps scales and zero points in fp16


@dataclass
class Packed:
    """The quantized rows of one layer's K or V: codes, and what turns them back into numbers."""

    codes: torch.Tensor  # fp8 [.., pos, head_dim] · int8 uint8 [.., pos, head_dim] · int4 uint8 [.., pos, head_dim/2]
    scale: torch.Tensor  # fp8: one number · KIVI keys [.., pos/GROUP, 1, head_dim] · KIVI values [.., pos, 1]
    zero: torch.Tensor | None  # KIVI only, shaped as its scale
    keys: bool

    @property
    def positions(self) -> int:
        return self.codes.shape[-2]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.zero) if t is not None)

    def then(self, later: "Packed") -> "Packed":
        """These rows followed by `later` ones: codes, and per-group or per-position scales, laid end to end."""
        per_row = self.scale.dim() > 0  # fp8's one scale is shared, not repeated
        cat = lambda a, b: torch.cat([a, b], dim=2) if per_row else a  # noqa: E731
        return Packed(torch.cat([self.codes, later.codes], dim=2), cat(self.scale, later.scale),
                      None if self.zero is None else cat(self.zero, later.zero), self.keys)


class Codec:
    """Turns rows [batch, kv_head, pos, head_dim] into a Packed and back; `group`: rows quantized together."""

    group = 1

    def calibrate(self, x: torch.Tensor, keys: bool) -> None:
        """Shown the prefill's rows before anything is packed (a codec with a frozen scale sets it here)."""

    def pack(self, x: torch.Tensor, keys: bool) -> Packed: ...

    def unpack(self, p: Packed, dtype: torch.dtype) -> torch.Tensor: ...


class Fp8(Codec):
    """e4m3 with one per-tensor scale, calibrated on the prefill and frozen (transformers' Fp8QuantizedLayer's rule:
    its scale is set by its first update, the whole prompt). A codec used alone calibrates on its first rows."""

    def __init__(self):
        self.frozen = {True: None, False: None}  # the scale of K and of V

    def calibrate(self, x: torch.Tensor, keys: bool) -> None:
        if self.frozen[keys] is None:
            self.frozen[keys] = (x.abs().amax().float() / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)

    def pack(self, x: torch.Tensor, keys: bool) -> Packed:
        self.calibrate(x, keys)  # a no-op once the prefill has set the scale
        scale = self.frozen[keys]
        return Packed((x.float() / scale).to(FP8), scale, None, keys)  # the cast saturates at ±448

    def unpack(self, p: Packed, dtype: torch.dtype) -> torch.Tensor:
        return (p.codes.float() * p.scale).to(dtype)


class Kivi(Codec):
    """Asymmetric integers: keys per channel over GROUP positions, values per position (KIVI)."""

    group = GROUP

    def __init__(self, bits: int):
        self.bits, self.levels = bits, 2**bits - 1

    def pack(self, x: torch.Tensor, keys: bool) -> Packed:
        b, h, n, d = x.shape
        # keys: [.., groups, GROUP, d], a range over the GROUP positions of each channel
        # values: [.., n, d], a range over the d channels of each position
        view = x.float().view(b, h, n // GROUP, GROUP, d) if keys else x.float()
        low, high = view.amin(dim=-2 if keys else -1, keepdim=True), view.amax(dim=-2 if keys else -1, keepdim=True)
        scale = ((high - low) / self.levels).clamp(min=1e-6).to(SCALE_DTYPE)
        zero = low.to(SCALE_DTYPE)
        codes = ((view - zero.float()) / scale.float()).round().clamp(0, self.levels).to(torch.uint8).view(b, h, n, d)
        if self.bits == 4:  # two codes a byte: channel 2i in the low half, 2i + 1 in the high half
            codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
        return Packed(codes, scale, zero, keys)

    def unpack(self, p: Packed, dtype: torch.dtype) -> torch.Tensor:
        codes = p.codes
        if self.bits == 4:
            codes = torch.stack([codes & 0x0F, codes >> 4], dim=-1).flatten(-2)
        b, h, n, d = codes.shape
        view = codes.view(b, h, n // GROUP, GROUP, d) if p.keys else codes
        return (view.float() * p.scale.float() + p.zero.float()).view(b, h, n, d).to(dtype)


CODECS = {"fp8": Fp8, "int8": lambda: Kivi(8), "int4": lambda: Kivi(4)}


class QuantizedLayer(OwnLayer):
    """One layer: quantized chunks of the older positions, and the newest ones in full precision.

        keys, values   [batch, kv_head, tail, head_dim]   the full-precision tail (budget <= tail < budget + group)
        packed_keys    list of Packed, oldest first       everything older, quantized once
    """

    def __init__(self, codec: str, budget: int):
        super().__init__()
        self.codec_name, self.codec, self.budget = codec, CODECS[codec](), budget
        self.packed_keys: Packed | None = None
        self.packed_values: Packed | None = None
        self.dequant_ms = 0.0  # time spent dequantizing the older rows, over every timed pass so far
        self.decoded_numel = 0  # K and V numbers of the rows decoded after the prefill (the scale's calibration)
        self.past_range = 0  # of them, those past what the frozen scale holds (fp8: |x| > 448 · scale): saturated
        self.worst_over = 0.0  # the largest |x| / (448 · scale) among them (over 1: past the range)
        self.timed = False  # time the dequantize (two device syncs a pass): only where a caller reads dequant_ms

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append the fed rows to the tail; return the older rows dequantized plus the tail (this pass reads them)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.codec.calibrate(key_states, keys=True)  # the prefill: every prompt position sets the scale
            self.codec.calibrate(value_states, keys=False)
        else:
            self.count_past_range(key_states, value_states)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        self.seen += key_states.shape[-2]
        if self.packed_keys is None:
            return self.keys, self.values
        with span(self.device if self.timed else None) as took:  # timed: the dequantize on its own, between syncs
            old_k = self.codec.unpack(self.packed_keys, self.dtype)
            old_v = self.codec.unpack(self.packed_values, self.dtype)
        if self.timed:
            self.dequant_ms += took.ms
        return torch.cat([old_k, self.keys], dim=-2), torch.cat([old_v, self.values], dim=-2)

    def count_past_range(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """A decoded row's numbers past the frozen scale's range (fp8: ±448 · the prompt's scale), counted as the row
        arrives: packed later, they saturate at ±448. A codec without a frozen scale (KIVI) has no such range."""
        frozen = getattr(self.codec, "frozen", None)
        if frozen is None or frozen[True] is None:
            return
        for x, is_keys in ((keys, True), (values, False)):
            over = x.abs().float() / (FP8_MAX * frozen[is_keys])
            self.decoded_numel += x.numel()
            self.past_range += int((over > 1).sum())
            self.worst_over = max(self.worst_over, float(over.max()))

    def observe(self, weights=None) -> None:
        """After this layer's attention: quantize the rows that fell out of the full-precision budget, once."""
        n = (self.keys.shape[-2] - self.budget) // self.codec.group * self.codec.group
        if n <= 0:
            return
        k = self.codec.pack(self.keys[:, :, :n].contiguous(), keys=True)
        v = self.codec.pack(self.values[:, :, :n].contiguous(), keys=False)
        self.packed_keys = k if self.packed_keys is None else self.packed_keys.then(k)
        self.packed_values = v if self.packed_values is None else self.packed_values.then(v)
        self.keys, self.values = self.keys[:, :, n:].clone(), self.values[:, :, n:].clone()

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise RuntimeError("a quantized cache cannot be rolled back: its older rows were rounded")

    @property
    def quantized(self) -> int:
        """Positions held in fewer bits (the oldest ones)."""
        return 0 if self.packed_keys is None else self.packed_keys.positions

    def tail_numel(self) -> int:
        """Numbers held in full precision (K and V of the newest rows)."""
        return 0 if self.keys is None or self.keys.numel() == 0 else self.keys.numel() + self.values.numel()

    def quantized_numel(self) -> int:
        """Numbers (K and V) in the quantized rows: what every pass dequantizes into a full-precision copy."""
        if self.packed_keys is None:
            return 0
        b, h, _, d = self.keys.shape
        return 2 * b * h * self.quantized * d

    def packed_nbytes(self) -> int:
        """Bytes of the quantized rows: codes, scales, zero points."""
        return 0 if self.packed_keys is None else self.packed_keys.nbytes() + self.packed_values.nbytes()

    def nbytes(self) -> int:
        """Bytes held, from the tensors: codes, scales, zero points, and the full-precision tail."""
        tail = 0 if not self.tail_numel() else self.tail_numel() * self.keys.element_size()
        return tail + self.packed_nbytes()
