"""ClipGeometry.visible_actions: which of a clip's actions its frames show, counted by hand."""

from __future__ import annotations

import pytest

from cosmos3_robot.processors.geometry import ClipGeometry


@pytest.mark.parametrize(
    ("frames", "frame_step", "actions", "action_step", "seen"),
    [
        (5, 1, 10, 1, 4),  # frames 0..4 show the actions at frames 0..3; 4..9 are after the clip
        (5, 1, 4, 1, 4),
        (13, 1, 10, 1, 10),  # frames 0..12 show every action of a 1 s chunk
        (9, 2, 20, 1, 16),  # frames 0, 2, .., 16 (dataset frames): actions 0..15 show
        (5, 1, 4, 3, 2),  # actions at frames 0 and 3 show in frames 1..4; the one at 6 does not
    ],
)
def test_visible_actions_by_hand(frames, frame_step, actions, action_step, seen):
    g = ClipGeometry(fps=10.0, num_frames=frames, frame_step=frame_step, num_actions=actions,
                     action_step=action_step, obs_frames=1, image_size=32)  # fmt: skip
    assert g.visible_actions == seen
    # the same rule in seconds: an action shows iff a frame of the clip comes after it
    last = g.video_time()[-1]
    assert int((g.action_time() < last - 1e-6).sum()) == seen
