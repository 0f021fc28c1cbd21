"""Tokenizers and scene questions/answers from simulator state (processors/tokenizers.py, datasets/text.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cosmos3_robot.datasets.text import caption, direction, make_qa, relative_answer, scene_points
from cosmos3_robot.model import preset
from cosmos3_robot.processors.tokenizers import ByteTokenizer, HFTokenizer, load_tokenizer

REACH_NAMES = ["goal_x", "goal_y", "distractor_x", "distractor_y", "fingertip_x", "fingertip_y"]


# ---- tokenizers ----------------------------------------------------------------------------------
def test_byte_tokenizer_round_trip_and_ids():
    tok = ByteTokenizer()
    assert tok.vocab_size <= preset("tiny").vocab_size and tok.vocab_size <= preset("sim-small").vocab_size
    text = "push the puck → top left, 0.12 m"
    ids = tok.encode(text, bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and all(3 <= i < 259 for i in ids[1:-1])
    assert tok.decode(ids) == text
    assert tok.encode("") == [1]
    v = tok.vision_ids
    assert len({v.vision_start_token_id, v.image_token_id, v.vision_end_token_id, v.video_token_id}) == 4
    assert max(v.vision_start_token_id, v.video_token_id) < tok.vocab_size


def test_batch_encode_right_pads_with_null():
    tok = ByteTokenizer()
    ids, lengths = tok.batch_encode(["ab", "abcd", ""])
    assert ids.shape == (3, 5) and lengths.tolist() == [3, 5, 1]
    assert ids[0, 3:].tolist() == [0, 0] and ids[2, 1:].tolist() == [0] * 4
    assert tok.decode(ids[1]) == "abcd"


def test_tokenizer_save_load(tmp_path):
    path = ByteTokenizer().save(tmp_path / "tok")
    tok = load_tokenizer(path.parent)
    assert isinstance(tok, ByteTokenizer)
    assert isinstance(load_tokenizer(tok.state()), ByteTokenizer)
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "nothing")


def test_hf_tokenizer_folder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
        "<|vision_start|>",
        "<|image_pad|>",
        "<|vision_end|>",
        "<|video_pad|>",
    ]
    vocab = {w: i for i, w in enumerate(words + ["push", "the", "puck", "up"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(tmp_path / "hf")
    tok = load_tokenizer(tmp_path / "hf")
    assert isinstance(tok, HFTokenizer)
    assert tok.encode("push the puck", eos=True) == [1, 8, 9, 10, 2]
    assert tok.decode(tok.encode("push the puck")) == "push the puck"
    assert tok.vision_ids.image_token_id == 5 and tok.vision_ids.video_token_id == 7
    ids, lengths = tok.batch_encode(["up", "push the puck"])
    assert lengths.tolist() == [2, 4] and ids[0, 2:].tolist() == [0, 0]
    assert load_tokenizer(tok.state()).vocab_size == tok.vocab_size


# ---- geometry ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "offset, word",
    [
        ((1.0, 0.0), "to the right"),
        ((1.0, 0.3), "to the right"),  # 16.7° is within 22.5° of +x
        ((1.0, 1.0), "up and to the right"),
        ((0.0, 1.0), "up"),
        ((-0.1, 0.1), "up and to the left"),
        ((-1.0, 0.0), "to the left"),
        ((-1.0, -0.9), "down and to the left"),
        ((0.05, -1.0), "down"),
        ((0.7, -0.6), "down and to the right"),
    ],
)
def test_direction_sectors(offset, word):
    assert direction(np.array(offset)) == word


def test_relative_answer_hand_computed():
    # target at (0.10, 0.20), gripper at (0.20, 0.10): offset (-0.1, +0.1), 0.1414 m.
    assert relative_answer(np.array([0.10, 0.20]), np.array([0.20, 0.10])) == "up and to the left, 0.14 m"
    # straight down by 5 cm (image: +y is up)
    assert relative_answer(np.array([0.0, -0.05]), np.array([0.0, 0.0])) == "down, 0.05 m"
    assert relative_answer(np.array([0.001, 0.0]), np.array([0.0, 0.0])).startswith("at the same place")


def test_scene_points_reads_named_xy_pairs():
    pts = scene_points(REACH_NAMES, [0.1, 0.2, -0.1, 0.0, 0.05, -0.05])
    assert set(pts) == {"goal", "distractor", "fingertip"}
    np.testing.assert_allclose(pts["fingertip"], [0.05, -0.05])
    with pytest.raises(ValueError, match="6 names"):
        scene_points(REACH_NAMES, [0.0] * 5)


def _parse(answer: str) -> tuple[str, float]:
    word, _, dist = answer.rpartition(", ")
    return word, float(dist.removesuffix(" m"))


def test_make_qa_is_deterministic_and_correct():
    rng = np.random.default_rng(1)
    seen = set()
    for frame in range(60):
        state = rng.uniform(-0.2, 0.2, size=6)
        qa = make_qa(
            REACH_NAMES, state, "move the fingertip to the red target", seed=3, episode=5, frame=frame
        )
        again = make_qa(
            REACH_NAMES, state, "move the fingertip to the red target", seed=3, episode=5, frame=frame
        )
        assert qa == again
        seen.add(qa.kind)
        pts = scene_points(REACH_NAMES, state)
        names = {"target": "goal", "fingertip": "fingertip", "distractor": "distractor"}
        if qa.kind == "caption":
            assert qa.answer == "move the fingertip to the red target"
            continue
        q = qa.question.removesuffix("?").split(" the ")
        a, b = names[q[1].split(" ")[0]], names[q[2]]
        offset = pts[a] - pts[b]
        if qa.kind == "relative":
            word, dist = _parse(qa.answer)
            assert word == direction(offset)
            # hand-computed: sector of atan2(dy, dx)
            sector = round(math.degrees(math.atan2(offset[1], offset[0])) / 45) % 8
            assert word == ["to the right", "up and to the right", "up", "up and to the left",
                            "to the left", "down and to the left", "down", "down and to the right"][sector]  # fmt: skip
        else:
            dist = float(qa.answer.removesuffix(" m"))
        assert dist == pytest.approx(math.hypot(*offset), abs=0.005 + 1e-9)
    assert seen == {"relative", "distance", "caption"}
    # another seed asks other questions
    other = [make_qa(REACH_NAMES, np.zeros(6) + 0.1, "t", seed=4, episode=5, frame=f) for f in range(20)]
    base = [make_qa(REACH_NAMES, np.zeros(6) + 0.1, "t", seed=3, episode=5, frame=f) for f in range(20)]
    assert other != base


def test_qa_matches_reach_env_geometry():
    """Answers computed from the recorded env-state layout agree with the env's own properties."""
    from cosmos3_robot.envs.reach import ReachEnv

    env = ReachEnv(image_size=32)
    try:
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            pts = scene_points(ReachEnv.ENV_STATE_NAMES, obs["environment_state"])
            np.testing.assert_allclose(pts["goal"], env.goal_xy, atol=1e-6)
            np.testing.assert_allclose(pts["fingertip"], env.fingertip_xy, atol=1e-6)
            want = relative_answer(env.goal_xy, env.fingertip_xy)
            assert relative_answer(pts["goal"], pts["fingertip"]) == want
    finally:
        env.close()


def test_make_qa_errors_and_caption():
    with pytest.raises(ValueError, match="fewer than two"):
        make_qa(["a_x", "a_y"], [0.0, 0.0], "t", seed=0, episode=0, frame=0, kinds=("relative",))
    with pytest.raises(ValueError, match="kinds"):
        make_qa(REACH_NAMES, np.zeros(6), "t", seed=0, episode=0, frame=0, kinds=("poem",))
    assert make_qa([], np.zeros(0), "go", seed=0, episode=0, frame=0, kinds=("caption",)).answer == "go"
    assert caption("  reach  ").answer == "reach"
    assert torch.is_tensor(ByteTokenizer().batch_encode(["x"])[0])
