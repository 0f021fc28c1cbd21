"""Foreground weighting of the VAE's reconstruction loss, and the foreground PSNR it is judged by."""

from __future__ import annotations

import math

import pytest
import torch

from cosmos3_robot.eval.metrics import foreground_mask, foreground_psnr
from cosmos3_robot.training.vae import reconstruction_loss


def scene() -> tuple[torch.Tensor, torch.Tensor]:
    """A floor of (0.95, 0.95, 0.9) with a red 4x4 square at rows/cols 2..5: (3, 16, 16) and its mask."""
    img = torch.tensor([0.95, 0.95, 0.9])[:, None, None].repeat(1, 16, 16)
    img[:, 2:6, 2:6] = torch.tensor([0.9, 0.1, 0.1])[:, None, None]
    mask = torch.zeros(16, 16, dtype=torch.bool)
    mask[2:6, 2:6] = True
    return img, mask


def test_the_foreground_is_what_differs_from_the_floor_and_its_psnr_by_hand():
    img, mask = scene()
    assert torch.equal(foreground_mask(img), mask)
    assert torch.equal(foreground_mask(img[None, None]), mask[None, None])  # leading dims kept
    pred = img.clone()
    pred[:, 2:6, 2:6] = torch.tensor([0.5, 0.5, 0.5])[:, None, None]  # the red square turned grey
    pred[:, 10, 10] = 0.0  # an error on the floor does not count
    mse = ((0.9 - 0.5) ** 2 + 0.4**2 + 0.4**2) / 3
    assert foreground_psnr(pred, img) == pytest.approx(10 * math.log10(1 / mse), rel=1e-5)
    with pytest.raises(ValueError, match="no foreground"):
        foreground_psnr(img, torch.full_like(img, 0.5))


def test_foreground_weight_is_a_weighted_mean_by_hand():
    img, mask = scene()
    x = (img * 2 - 1)[None, :, None]  # (1, 3, 1, 16, 16) in [-1, 1]
    recon = x.clone()
    recon[0, 0, 0, 2:6, 2:6] += 0.5  # an error of 0.5 on the red channel of the square
    recon[0, 1, 0, 12, 12] += 1.0  # an error of 1 on one floor pixel
    n = 3 * 16 * 16
    plain = (16 * 0.25 + 1.0) / n
    assert reconstruction_loss(recon, x, "mse").item() == pytest.approx(plain)
    w = 4.0  # 16 foreground pixels weigh 5, 240 floor pixels weigh 1 (per channel)
    weighted = (16 * 0.25 * (1 + w) + 1.0) / (3 * (16 * (1 + w) + 240))
    assert reconstruction_loss(recon, x, "mse", w).item() == pytest.approx(weighted)
    assert reconstruction_loss(recon, x, "l1", w).item() == pytest.approx(
        (16 * 0.5 * (1 + w) + 1.0) / (3 * (16 * (1 + w) + 240))
    )
