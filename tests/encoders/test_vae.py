"""Video VAE wrapper: geometry, real-time latent stamps, round trips, folders, cache, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from cosmos3_robot.encoders.vae import WAN22_LATENTS_MEAN, VideoVAE, VideoVAEConfig, vae_config
from cosmos3_robot.processors.geometry import latent_frame_times, num_latent_frames

SIZE = 32  # smallest legal frame size: 16x VAE × 2x2 patch merge


@pytest.fixture(scope="module")
def tiny_vae() -> VideoVAE:
    torch.manual_seed(0)
    return VideoVAE(vae_config("tiny"))


def _clip(t: int, b: int = 1, size: int = SIZE, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, t, 3, size, size, generator=torch.Generator().manual_seed(seed))


# ---- geometry and time -----------------------------------------------------------------------


@pytest.mark.parametrize("fps", [10, 20, 24, 30])
@pytest.mark.parametrize("num_frames", [1, 5, 9, 17])
def test_latent_frame_times(num_frames: int, fps: int) -> None:
    start = 3.25  # clips rarely start at t = 0
    times = start + torch.arange(num_frames, dtype=torch.float64) / fps
    lt = latent_frame_times(times)
    assert lt.shape == (1 + (num_frames - 1) // 4,) == (num_latent_frames(num_frames),)
    assert lt[0] == times[0]  # latent 0 encodes frame 0 alone
    for k in range(1, lt.shape[0]):  # latent k covers frames 4k-3 .. 4k and is stamped with frame 4k
        assert lt[k] == times[4 * k]
        assert times[4 * k - 3] <= lt[k]
    if lt.shape[0] > 1:  # evenly spaced: 4 frames per latent step, the first step included
        torch.testing.assert_close(lt.diff(), torch.full((lt.shape[0] - 1,), 4 / fps, dtype=torch.float64))


@pytest.mark.parametrize("num_frames", [1, 5, 9, 17])
def test_encode_decode_shapes(tiny_vae: VideoVAE, num_frames: int) -> None:
    frames = _clip(num_frames, b=2, size=64)
    latents = tiny_vae.encode(frames)
    assert latents.shape == (2, 8, num_latent_frames(num_frames), 4, 4)
    assert latents.dtype == torch.float32 and torch.isfinite(latents).all()
    recon = tiny_vae.decode(latents)
    assert recon.shape == frames.shape
    assert recon.min() >= 0 and recon.max() <= 1
    torch.testing.assert_close(tiny_vae.encode(frames), latents, rtol=0, atol=0)  # deterministic


def test_frozen_by_default(tiny_vae: VideoVAE) -> None:
    assert not any(p.requires_grad for p in tiny_vae.parameters())
    tiny_vae.train()  # a parent calling .train() must not unfreeze it
    assert not tiny_vae.training and not tiny_vae.autoencoder.training
    assert not tiny_vae.encode(_clip(1)).requires_grad


def test_latent_normalisation_uses_stats() -> None:
    vae = VideoVAE(vae_config("tiny"))
    frames = _clip(5)
    raw = vae.encode(frames)
    mean, std = torch.linspace(-1, 1, 8), torch.linspace(0.5, 2, 8)
    vae.set_latent_stats(mean, std)
    torch.testing.assert_close(
        vae.encode(frames), (raw - mean.view(1, -1, 1, 1, 1)) / std.view(1, -1, 1, 1, 1)
    )
    torch.testing.assert_close(vae.denormalize(vae.normalize(raw)), raw)


def test_wan22_preset_is_the_published_layout() -> None:
    cfg = vae_config("wan2.2")
    kw = cfg.to_diffusers()
    assert (kw["base_dim"], kw["decoder_base_dim"], kw["z_dim"]) == (160, 256, 48)
    assert (kw["patch_size"], kw["is_residual"], kw["in_channels"]) == (2, True, 12)
    assert (kw["scale_factor_temporal"], kw["scale_factor_spatial"]) == (4, 16)
    assert kw["latents_mean"] == WAN22_LATENTS_MEAN and len(kw["latents_std"]) == 48
    with torch.device("meta"):
        vae = VideoVAE(cfg)
    assert 6e8 < sum(p.numel() for p in vae.parameters()) < 8e8  # ~0.7 B parameters


def test_small_preset_latent_channels_configurable() -> None:
    assert vae_config("sim-small").latent_channels == 16
    vae = VideoVAE(vae_config("tiny", latent_channels=12))
    assert vae.encode(_clip(1)).shape[1] == 12


# ---- training really reduces the reconstruction error --------------------------------------------


def test_reconstruction_improves_with_training() -> None:
    from cosmos3_robot.eval.metrics import COLLAPSED_SPREAD, frame_psnr, latent_spread
    from cosmos3_robot.training.vae import vae_loss
    from cosmos3_robot.training.vae_config import VAETrainConfig

    torch.manual_seed(0)
    vae = VideoVAE(vae_config("tiny"))
    # a trivial pattern: four flat-coloured quadrants, at four colourings
    frames = torch.zeros(4, 1, 3, SIZE, SIZE)
    colours = torch.tensor([[0.9, 0.1, 0.1], [0.1, 0.8, 0.2], [0.2, 0.3, 0.9], [0.8, 0.8, 0.1]])
    for i in range(4):
        for q, (ys, xs) in enumerate([(0, 0), (0, 16), (16, 0), (16, 16)]):
            frames[i, 0, :, ys : ys + 16, xs : xs + 16] = colours[(i + q) % 4].view(3, 1, 1)

    def score() -> float:
        with torch.no_grad():
            return frame_psnr(vae.decode(vae.encode(frames)), frames).mean().item()

    before = score()
    vae.unfreeze()
    opt = torch.optim.Adam(vae.autoencoder.parameters(), lr=1e-2)
    args = VAETrainConfig(
        out="unused", root="unused", dtype="fp32", loss="l1", edge_weight=0.0, kl_weight=1e-4
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convolutions are overhead-bound; one thread is faster on a busy CPU
    try:
        for _ in range(150):
            loss, _ = vae_loss(vae, frames, args)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    vae.freeze()
    after = score()  # measured: 8.7 dB -> 30.7 dB
    assert after > before + 12, (before, after)
    assert after > 24, after
    # four different images need four different latents: the trained encoder is not collapsed
    with torch.no_grad():
        assert latent_spread(vae.encode(frames)) > COLLAPSED_SPREAD


def test_latent_spread_is_the_between_clip_share_of_the_spread() -> None:
    from cosmos3_robot.eval.metrics import latent_spread

    g = torch.Generator().manual_seed(0)
    field = torch.randn(1, 4, 2, 3, 3, generator=g)  # varies over channels and positions
    same = field.expand(16, -1, -1, -1, -1)
    assert latent_spread(same) == 0.0  # every clip encodes to the same latent
    nearly = same + 1e-3 * torch.randn(16, 4, 2, 3, 3, generator=g)
    assert latent_spread(nearly) < 1e-2
    independent = torch.randn(256, 4, 2, 3, 3, generator=g)
    assert abs(latent_spread(independent) - 1.0) < 0.05  # std over clips = overall std = 1
    assert latent_spread(7.0 * independent + 3.0) == pytest.approx(latent_spread(independent), rel=1e-5)
    with pytest.raises(ValueError, match="at least 2 clips"):
        latent_spread(field)


# ---- folders ---------------------------------------------------------------------------------


def test_save_load_roundtrip(tmp_path, tiny_vae: VideoVAE) -> None:
    vae = VideoVAE(vae_config("tiny"))
    vae.set_latent_stats(torch.linspace(-0.5, 0.5, 8), torch.linspace(0.7, 1.3, 8))
    vae.save_pretrained(tmp_path / "vae")
    vae.save_pretrained(tmp_path / "vae")  # overwriting an existing folder is atomic too
    assert not [p for p in tmp_path.iterdir() if p.name != "vae"]  # no temp folders left behind
    loaded = VideoVAE.from_pretrained(tmp_path / "vae")
    assert loaded.config == vae.config
    for (k, a), (k2, b) in zip(vae.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)
    assert torch.equal(loaded.latents_std, vae.latents_std)
    frames = _clip(5)
    assert torch.equal(loaded.encode(frames), vae.encode(frames))
    assert not any(p.requires_grad for p in loaded.parameters())
    # a pipeline folder with a vae/ subfolder also loads
    assert VideoVAE.from_pretrained(tmp_path).config == vae.config


def test_other_architecture_folder_raises(tmp_path) -> None:
    from diffusers import AutoencoderKLWan

    wan21 = AutoencoderKLWan(base_dim=8, z_dim=4, latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    wan21.save_pretrained(tmp_path / "wan21")
    with pytest.raises(ValueError, match="different architecture.*Wan2.1.*is_residual=False"):
        VideoVAE.from_pretrained(tmp_path / "wan21")
    other = tmp_path / "sd_vae"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 4}))
    with pytest.raises(ValueError, match="AutoencoderKL, not an AutoencoderKLWan"):
        VideoVAE.from_pretrained(other)


# ---- latent cache ----------------------------------------------------------------------------


def test_latent_cache_identical_to_direct_encoding(tmp_path, tiny_vae: VideoVAE) -> None:
    from cosmos3_robot.training.data.latent_cache import CachedEncoder, LatentCache

    gen = torch.Generator().manual_seed(1)
    episodes = [
        (e, torch.randint(0, 256, (n, 3, SIZE, SIZE), dtype=torch.uint8, generator=gen))
        for e, n in [(0, 13), (3, 9)]
    ]
    source = [(e, f, torch.arange(f.shape[0], dtype=torch.float64) / 15) for e, f in episodes]
    cache = LatentCache.build(tmp_path / "cache", tiny_vae, source, clip_frames=5, stride=4)
    assert cache.episodes == [0, 3]
    assert cache.episode(0)["starts"].tolist() == [0, 4, 8]
    torch.testing.assert_close(
        cache.episode(3)["latent_times"][1], torch.tensor([4 / 15, 8 / 15], dtype=torch.float64)
    )

    frames = torch.stack([episodes[0][1][4:9], episodes[1][1][0:5]]).float() / 255  # (2, 5, 3, H, W)
    keys = [(0, 4), (3, 0)]
    with_cache = CachedEncoder(tiny_vae, LatentCache(tmp_path / "cache", vae=tiny_vae))
    without = CachedEncoder(tiny_vae)
    a, b = with_cache.encode(frames, keys), without.encode(frames, keys)
    assert with_cache.hits == 2 and with_cache.misses == 0 and without.misses == 2
    assert torch.equal(a, b)
    assert torch.equal(a, torch.cat([tiny_vae.encode(frames[i : i + 1]) for i in range(2)]))
    # a cache written by another VAE is refused
    with pytest.raises(ValueError, match="different VAE"):
        LatentCache(tmp_path / "cache", vae=VideoVAE(vae_config("tiny")))


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frames, match",
    [
        (torch.rand(1, 5, 4, SIZE, SIZE), "3 RGB channels"),
        (torch.rand(1, 5, SIZE, SIZE, 3), "channel-last"),
        ((torch.rand(1, 5, 3, SIZE, SIZE) * 255).to(torch.uint8), r"floating point.*float\(\) / 255"),
        (torch.rand(1, 5, 3, SIZE, SIZE) * 255, r"\[0, 1\].*divide by 255"),
        (torch.rand(1, 5, 3, SIZE, SIZE) * 2 - 1, r"\(x \+ 1\) / 2"),
        (torch.rand(1, 4, 3, SIZE, SIZE), r"1 \+ 4k.*Trim the clip to 1 frames or extend it to 5"),
        (torch.rand(1, 6, 3, SIZE, SIZE), r"1 \+ 4k.*Trim the clip to 5 frames"),
        (torch.rand(1, 5, 3, 48, SIZE), r"not divisible by 32.*H=48.*Resize"),
        (torch.rand(1, 1, 3, 16, 16), "not divisible by 32"),
        (torch.rand(5, 3, SIZE, SIZE), "add the batch axis"),
    ],
)
def test_bad_frames_raise(tiny_vae: VideoVAE, frames: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_vae.encode(frames)


def test_bad_latents_and_times_raise(tiny_vae: VideoVAE) -> None:
    with pytest.raises(ValueError, match=r"\(B, 8, T_lat, h, w\)"):
        tiny_vae.decode(torch.zeros(1, 48, 1, 2, 2))
    with pytest.raises(ValueError, match="1 \\+ 4k"):
        latent_frame_times(torch.arange(7.0))
    with pytest.raises(ValueError, match="dim_mult must hold 4"):
        VideoVAEConfig(dim_mult=[1, 2, 4])
    with pytest.raises(ValueError, match="one value per latent channel"):
        VideoVAEConfig(latent_channels=8, latents_mean=[0.0] * 4)


# ---- the train-vae command end to end (writes a small LeRobot dataset; ~8 s) ----------------------


def test_train_vae_command_resumes_and_feeds_the_cache(tmp_path) -> None:
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from cosmos3_robot.scripts import train_vae
    from cosmos3_robot.training.data.latent_cache import LatentCache

    features = {
        "observation.image": {
            "dtype": "video",
            "shape": (SIZE, SIZE, 3),
            "names": ["height", "width", "channels"],
        },
        "action": {"dtype": "float32", "shape": (2,), "names": None},
    }
    ds = LeRobotDataset.create("local/vae_test", fps=10, features=features, root=tmp_path / "data")
    rng = np.random.default_rng(0)
    for _ in range(3):
        for t in range(9):
            img = np.full((SIZE, SIZE, 3), 40, np.uint8)
            img[8:16, 2 * t : 2 * t + 8] = (220, 60, 30)  # a block sliding right
            ds.add_frame(
                {"observation.image": img, "action": rng.normal(size=2).astype(np.float32), "task": "t"}
            )
        ds.save_episode()
    ds.finalize()

    common = ["--repo-id", "local/vae_test", "--root", str(tmp_path / "data"), "--out", str(tmp_path / "run"),
              "--preset", "tiny", "--batch-frames", "5", "--eval-every", "2", "--save-every", "2",
              "--holdout-episodes", "1", "--threads", "1"]  # fmt: skip
    assert train_vae.main([*common, "--steps", "2"]) == 0
    assert train_vae.main([*common, "--steps", "4"]) == 0  # resumes at step 2
    log = json.loads((tmp_path / "run" / "train_log.json").read_text())
    assert log["step"] == 4 and [h["step"] for h in log["history"]] == [2, 4]
    # the quality report sits beside the weights, in the same atomic folder
    quality = json.loads((tmp_path / "run" / "vae" / "cosmos3_quality.json").read_text())
    assert quality["step"] == 4 and quality["psnr"] == log["history"][-1]["psnr"]
    vae = VideoVAE.from_pretrained(tmp_path / "run" / "vae")
    cache = LatentCache.build_from_lerobot(
        tmp_path / "cache", vae, "local/vae_test", tmp_path / "data", clip_frames=5, stride=4, progress=False
    )
    assert cache.episodes == [0, 1, 2] and cache.episode(1)["latents"].shape == (2, 8, 2, 2, 2)


def test_later_latent_use_tells_whether_the_decoder_reads_later_latents() -> None:
    from cosmos3_robot.eval.metrics import later_latent_use

    class Decoder:  # latents (N, 1, T_lat, 1, 1) -> frames (N, 1 + 4(T_lat - 1), 3, 2, 2)
        def __init__(self, reads_later: bool):
            self.reads_later = reads_later

        def decode(self, z: torch.Tensor) -> torch.Tensor:
            first = z[:, :, :1].flatten(1)  # (N, 1)
            later = z[:, :, 1:] if self.reads_later else z[:, :, :1].expand_as(z[:, :, 1:])
            later = later.flatten(1).repeat_interleave(4, dim=1)  # each later latent -> 4 frames
            return torch.cat([first, later], 1)[:, :, None, None, None].expand(-1, -1, 3, 2, 2)

    z = torch.randn(5, 1, 3, 1, 1, generator=torch.Generator().manual_seed(0))
    frames = Decoder(True).decode(z)  # the decoder reproduces the clips exactly
    assert later_latent_use(Decoder(True), z, frames) == pytest.approx(1.0)
    assert later_latent_use(Decoder(False), z, frames) == 0.0  # later frames drawn from latent 0 only
    with pytest.raises(ValueError, match="2 latent frames"):
        later_latent_use(Decoder(True), z[:, :, :1], frames[:, :1])


@pytest.mark.slow
def test_train_vae_killed_while_saving_resumes_to_the_same_weights(tmp_path) -> None:
    """kill -9 inside the second checkpoint save, then the same command: it resumes from the first
    checkpoint and ends with the weights of a run that was never interrupted."""
    import os
    import subprocess
    import sys

    from cosmos3_robot.files import read_tensors
    from tests._data_fixtures import record_small

    record_small(tmp_path / "data", episodes=3, image_size=32)

    def argv(out):
        return ["train-vae", "--root", str(tmp_path / "data"), "--out", str(out), "--preset", "tiny",
                "--batch-frames", "5", "--eval-every", "2", "--save-every", "2", "--holdout-episodes", "1",
                "--threads", "1", "--steps", "4", "--dtype", "fp32"]  # fmt: skip

    script = f"""
import os, signal
from cosmos3_robot.training import vae
real, calls = vae.save_vae_checkpoint, []
def dying(path, *a, **k):
    calls.append(1)
    if len(calls) == 2:
        (path.with_name(path.name + ".tmp")).write_bytes(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, *a, **k)
vae.save_vae_checkpoint = dying
from cosmos3_robot.cli import main
main({argv(tmp_path / "killed")!r})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ})
    assert r.returncode == -9, r.stderr[-2000:]
    from cosmos3_robot.cli import main

    assert main(argv(tmp_path / "killed")) == 0  # resumes from step 2
    assert main(argv(tmp_path / "straight")) == 0
    killed = read_tensors(tmp_path / "killed" / "checkpoint.safetensors")
    straight = read_tensors(tmp_path / "straight" / "checkpoint.safetensors")
    for k in straight:
        if k.startswith("model."):
            torch.testing.assert_close(killed[k], straight[k], rtol=0, atol=0, msg=k)
