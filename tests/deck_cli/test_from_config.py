"""`ulysses-ipc deck from-config` as a user runs it: the real program (no mpirun), its exit
code and its one-line message for each bad input, and a written deck read back with plain
h5py (not our reader). The agreement with every shipped preset is test_deck_from_config."""
import json
import pathlib
import subprocess

import h5py
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "diffusers_configs"


def deck(app, *args):
    return subprocess.run([app, "deck", "from-config", *map(str, args)], capture_output=True, text=True, timeout=60)


def write_config(tmp_path, cfg) -> pathlib.Path:
    p = tmp_path / "config.json"
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return p


def test_writes_a_deck_h5py_reads(app, tmp_path):
    out = tmp_path / "cog.h5"
    p = deck(app, CONFIGS / "cogvideox-5b.json", "--resolution", "720x480", "--frames", "49", "-o", out)
    assert p.returncode == 0, p.stderr
    assert "17550 video tokens + 226 text tokens" in p.stdout
    with h5py.File(out, "r") as f:
        names = sorted(f["cases"].keys())
        assert names == ["cogvideox-720x480-49f.tp2u2", "cogvideox-720x480-49f.u2", "cogvideox-720x480-49f.u4",
                         "cogvideox-720x480-49f.u8"]
        for n in names:
            c = f["cases"][n]
            assert int(c.attrs["seq_len"]) == 17550 + 226
            assert int(c.attrs["heads"]) == 48 and int(c.attrs["head_dim"]) == 64


BAD = [
    # (what is wrong, config, options, part of the message)
    ("unknown class", {"_class_name": "UNet2DConditionModel"}, [],
     'unknown class "UNet2DConditionModel" (classes read: FluxTransformer2DModel, SD3Transformer2DModel, '
     "PixArtTransformer2DModel, HunyuanVideoTransformer3DModel, WanTransformer3DModel, CogVideoXTransformer3DModel)"),
    ("missing field", {"_class_name": "HunyuanVideoTransformer3DModel", "num_attention_heads": 24,
                       "patch_size": 2}, ["--frames", "129"],
     "'attention_head_dim' is missing (HunyuanVideoTransformer3DModel needs it)"),
    ("resolution does not divide", CONFIGS / "pixart-alpha.json", [],
     "--resolution: width 1000 does not divide by 16 (the VAE's 8x times patch 2 for PixArtTransformer2DModel)"),
    ("frames do not divide", CONFIGS / "hunyuanvideo.json", ["--frames", "128"],
     "--frames: 128 is not 1 + a multiple of 4 (the VAE's temporal compression for HunyuanVideoTransformer3DModel"),
    ("not JSON", "{", [], "not valid JSON"),
    ("text tokens on a cross-attention class", CONFIGS / "pixart-alpha.json", ["--text-tokens", "120"],
     "--text-tokens: PixArtTransformer2DModel attends the text by cross-attention"),
]


@pytest.mark.parametrize("what,cfg,opts,part", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error_and_exit_2(app, tmp_path, what, cfg, opts, part):
    path = cfg if isinstance(cfg, pathlib.Path) else write_config(tmp_path, cfg)
    res = "1000x1024" if what == "resolution does not divide" else "1280x720"
    out = tmp_path / "never.h5"
    p = deck(app, path, "--resolution", res, *opts, "-o", out)
    assert p.returncode == 2, (what, p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ulysses-ipc deck: error: "), p.stderr
    assert part in lines[0], (part, lines[0])
    assert not out.exists()
