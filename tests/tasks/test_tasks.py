"""Contract tests run over every task head, and overfitting in each mode."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file, save_file

from cosmos3_robot.flow import EulerSampler, SigmaSampler
from cosmos3_robot.model import MoT, preset
from cosmos3_robot.tasks import TASKS, ClipBatch, make_task

# What the table of docs/design.md ("The three action modes") says each mode noises (True) or keeps clean (False); None = absent.
TABLE = {
    "forward_dynamics": {"obs_video": False, "future_video": True, "action": False},
    "inverse_dynamics": {"obs_video": False, "future_video": False, "action": True},
    "policy": {"obs_video": False, "future_video": True, "action": True},
    "action_policy": {"obs_video": False, "future_video": None, "action": True},
    "video": {"obs_video": False, "future_video": True, "action": None},
}


def make_batch(
    b: int = 3, seed: int = 0, frames: int = 3, with_audio: bool = False, grid: int = 4
) -> ClipBatch:
    cfg = preset("tiny")
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 4, 5, 6, 3, 6][:b])
    ids = torch.randint(1, cfg.vocab_size, (b, 6), generator=g)
    na = 8
    batch = ClipBatch(
        input_ids=ids,
        lengths=lengths,
        video=torch.randn(b, cfg.latent_channels, frames, grid, grid, generator=g),
        video_time=torch.tensor([0.0, 0.4, 0.8][:frames]).expand(b, frames).clone(),
        video_valid=torch.ones(b, frames, dtype=torch.bool),
        obs_frames=1,
        action=torch.randn(b, na, cfg.action_dim, generator=g),
        action_time=(torch.arange(na).float() / 10).expand(b, na).clone(),
        action_valid=torch.ones(b, na, dtype=torch.bool),
        action_mask=torch.ones(b, cfg.action_dim, dtype=torch.bool),
        embodiment=torch.arange(b) % cfg.num_embodiments,
    )
    if with_audio:
        ns = 20
        batch = dataclasses.replace(
            batch,
            audio=torch.randn(b, ns, cfg.audio_dim, generator=g),
            audio_time=(torch.arange(ns).float() / 25).expand(b, ns).clone(),
            audio_valid=torch.ones(b, ns, dtype=torch.bool),
        )
    return batch


def tiny(seed: int = 0) -> MoT:
    torch.manual_seed(seed)
    return MoT(preset("tiny"))


@pytest.fixture(params=sorted(TASKS))
def task_name(request):
    return request.param


def test_clean_and_noised_tokens_match_design_table(task_name):
    head = make_task(task_name)
    batch = make_batch()
    gen = head.streams(batch)
    want = TABLE[task_name]
    per = 4  # 2x2 merged tokens per latent frame of 4x4
    vn = gen.video.noisy
    assert bool((vn[:, :per] == want["obs_video"]).all())
    if want["future_video"] is None:
        assert gen.video.length == per  # the future frames are not in the sequence
    else:
        assert bool((vn[:, per:] == want["future_video"]).all())
    if want["action"] is None:
        assert gen.action is None
    else:
        assert bool((gen.action.noisy == want["action"]).all())


def test_audio_follows_the_generated_frames():
    batch = make_batch(with_audio=True)
    fd = make_task("forward_dynamics").streams(batch).audio
    # Audio from the first future frame (0.4 s) on is generated, before it is observed.
    assert torch.equal(fd.noisy[0], batch.audio_time[0] >= 0.4 - 1e-6)
    assert not make_task("inverse_dynamics").streams(batch).audio.noisy.any()
    # Without future frames, their audio leaves the sequence with them (clean audio before 0.4 s stays).
    ap = make_task("action_policy").streams(batch).audio
    assert torch.equal(ap.valid[0], batch.audio_time[0] < 0.4 - 1e-6) and not ap.noisy.any()


def test_loss_is_finite_and_trains_only_the_generator(task_name):
    model = tiny()
    head = make_task(task_name)
    batch = make_batch(with_audio=True)
    with torch.no_grad():
        cache = model.reason(batch.input_ids, lengths=batch.lengths, logits=False).cache
    loss, parts = head.loss(model, batch, cache, SigmaSampler(), torch.Generator().manual_seed(0))
    assert torch.isfinite(loss) and loss.item() > 0
    assert set(parts) <= set(head.generates)
    loss.backward()
    for p in model.reasoner_parameters():
        assert p.grad is None
    grads = [p.grad for p in model.generator_parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


def test_seeded_determinism_and_save_load_round_trip(task_name, tmp_path):
    head = make_task(task_name)
    batch = make_batch()

    def loss_of(m):
        with torch.no_grad():
            cache = m.reason(batch.input_ids, lengths=batch.lengths, logits=False).cache
            return head.loss(m, batch, cache, SigmaSampler(), torch.Generator().manual_seed(7))[0]

    m = tiny(1)
    a, b = loss_of(m), loss_of(m)
    assert torch.equal(a, b)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(tmp_path / "w.safetensors"))
    m2 = tiny(2)
    assert not torch.equal(loss_of(m2), a)
    m2.load_state_dict(load_file(str(tmp_path / "w.safetensors")))
    assert torch.equal(loss_of(m2), a)


def test_sample_shapes(task_name):
    model = tiny().eval()
    head = make_task(task_name)
    batch = make_batch(b=2)
    out = head.sample(model, batch, EulerSampler(), num_steps=2, generator=torch.Generator().manual_seed(0))
    if "video" in out:
        frames = batch.video.shape[2] if head.future_frames else batch.obs_frames
        assert out["video"].shape == batch.video[:, :, :frames].shape
        assert torch.equal(out["video"][:, :, :1], batch.video[:, :, :1])  # observed frame copied through
    if task_name in ("inverse_dynamics", "policy", "action_policy"):
        assert out["action"].shape == batch.action.shape
    if task_name == "inverse_dynamics":
        assert torch.equal(out["video"], batch.video)  # nothing generated on the video side


def test_missing_modality_is_a_clear_error():
    batch = dataclasses.replace(make_batch(), action=None)
    with pytest.raises(ValueError, match="needs"):
        make_task("inverse_dynamics").streams(batch)
    with pytest.raises(ValueError, match="unknown task"):
        make_task("dance")


@pytest.mark.parametrize("mode", sorted(TASKS))
def test_tiny_overfits_a_handful_of_clips(mode):
    torch.manual_seed(0)
    model = MoT(preset("tiny"))
    head = make_task(mode)
    batch = make_batch(b=3, seed=3, frames=2, grid=2)  # 3 clips, one merged token per latent frame
    with torch.no_grad():
        cache = model.reason(batch.input_ids, lengths=batch.lengths, logits=False).cache
    sig = SigmaSampler()
    steps = 400
    opt = torch.optim.Adam(model.generator_parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps, pct_start=0.1)

    def eval_loss():
        with torch.no_grad():
            return sum(
                float(head.loss(model, batch, cache, sig, torch.Generator().manual_seed(100 + i))[0])
                for i in range(4)
            )

    before = eval_loss()
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        loss, _ = head.loss(model, batch, cache, sig, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    after = eval_loss()
    assert after < before / 10, (mode, before, after)

    # Training and sampling agree end to end (noise convention, σ embedding, clean conditioning): a
    # sample for clip i reproduces clip i's generated part, far closer than it comes to clip j's.
    model.eval()
    out = head.sample(model, batch, EulerSampler(), 20, generator=torch.Generator().manual_seed(7))
    masks = head.noisy_masks(batch)
    for name, noisy in masks.items():
        pred, true = out[name], getattr(batch, name)
        if name == "video":  # (B, C, T, H, W): the generated frames
            pred, true = pred[:, :, noisy[0]], true[:, :, noisy[0]]
        learned = head.loss_masks(batch).get(name)  # inverse dynamics: the actions its frames show
        if learned is not None:
            pred, true = pred[:, learned[0]], true[:, learned[0]]
        err = torch.cdist(pred.flatten(1), true.flatten(1)).square() / pred[0].numel()  # (sample i, clip j)
        own, other = err.diagonal(), err + torch.diag(torch.full((3,), float("inf")))
        # measured for forward and inverse dynamics: own ≤ 0.13, other ≥ 1.35
        assert torch.all(own < 0.2 * other.min(1).values), (mode, name, err)


def test_inverse_dynamics_learns_only_the_actions_its_frames_show(monkeypatch):
    """An action at time t shows in the frames after t: with latent frames at 0 / 0.4 s only the
    actions at 0.0-0.3 s carry loss; a third latent at 0.8 s shows all 8; a padded one shows none."""
    import cosmos3_robot.tasks.base as base

    seen, real = {}, base.flow_loss

    def spy(pred, target, noisy, valid, weights, cmask):
        seen["valid"] = valid["action"].clone()
        return real(pred, target, noisy, valid, weights, cmask)

    monkeypatch.setattr(base, "flow_loss", spy)
    model, head = tiny(), make_task("inverse_dynamics")

    def loss_mask(batch):
        with torch.no_grad():
            cache = model.reason(batch.input_ids, lengths=batch.lengths, logits=False).cache
            head.loss(model, batch, cache, SigmaSampler(), torch.Generator().manual_seed(0))
        return seen["valid"]

    two = make_batch(frames=2)
    assert loss_mask(two).tolist() == [[True] * 4 + [False] * 4] * 3
    three = make_batch(frames=3)
    three.action_valid[0, 7] = False  # padding still carries no loss
    assert loss_mask(three).tolist() == [[True] * 7 + [False]] + [[True] * 8] * 2
    three.video_valid[1, 2] = False  # the last latent is padding: back to 0.4 s
    assert loss_mask(three)[1].tolist() == [True] * 4 + [False] * 4
    # the policy learns every action (it predicts the future)
    assert make_task("policy").loss_masks(two) == {}


def test_noise_scale_starts_the_flow_from_scaled_noise():
    from cosmos3_robot.tasks.sampling import initial_latents, sample

    model = tiny().eval()
    batch = make_batch(b=2)
    gen = make_task("policy").streams(batch)
    eps = initial_latents(gen, torch.Generator().manual_seed(3))
    run = dict(num_steps=3, prompt=batch.prompt())
    want = sample(model, gen, EulerSampler(), noise={n: 0.5 * e for n, e in eps.items()}, **run)
    got = sample(
        model, gen, EulerSampler(), generator=torch.Generator().manual_seed(3), noise_scale=0.5, **run
    )
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    # at scale 0 the chunk no longer depends on the seed
    zero = [sample(model, gen, EulerSampler(), generator=torch.Generator().manual_seed(s), noise_scale=0.0, **run)
            for s in (1, 2)]  # fmt: skip
    assert torch.equal(zero[0]["action"], zero[1]["action"])
    assert not torch.equal(want["action"], zero[0]["action"])
