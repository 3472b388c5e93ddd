"""examples/parameter_counts.py prints counts that equal count_params() and the formulas."""

import re

from tests.scripts import run_script


def test_parameter_counts_small_settings():
    result = run_script(
        "examples/parameter_counts.py",
        *("--hidden-size", "64", "--num-heads", "4", "--filter-size", "256"),
        *("--presets", "transformer_tiny", "--vocab-size", "1000"),
    )
    out = result.stdout
    d, f = 64, 256
    attention, ffn = 4 * d * d, 2 * d * f + f + d  # 16,384 and 33,088
    # Encoder block: every row shows formula == count_params().
    assert f"| self_attention | {attention:,} | {attention:,} |" in out, out
    assert f"| ffn | {ffn:,} | {ffn:,} |" in out, out
    assert f"| layer_norm | {4 * d:,} | {4 * d:,} |" in out, out
    assert f"| block total | {attention + ffn + 4 * d:,} | {attention + ffn + 4 * d:,} |" in out
    # Decoder block: cross-attention and a third LayerNorm.
    decoder = 2 * attention + ffn + 6 * d
    assert f"| block total | {decoder:,} | {decoder:,} |" in out, out
    assert f"= {d**4:,} weights" in out, out
    # transformer_tiny (d 128, f 512, 2+2 layers, Pre-LN) with a 1,000-word shared vocabulary.
    d, f, vocab = 128, 512, 1000
    encoder_block = 4 * d * d + 2 * d * f + f + d + 4 * d
    decoder_block = 8 * d * d + 2 * d * f + f + d + 6 * d
    total = vocab * d + 2 * encoder_block + 2 * decoder_block + 2 * 2 * d
    assert f"| total = count_params() = formula | {total:,} | 100% |" in out, out
    share = float(re.search(r"FFN share: ([\d.]+)% of the whole model", out).group(1))
    assert abs(share / 100 - 4 * (2 * d * f + f + d) / total) < 1e-3, out
    assert "All counts equal count_params()" in out
