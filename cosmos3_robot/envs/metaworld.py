"""Meta-World v3 tasks with our env contract, registered as `cosmos3_robot/MetaWorld-<task>`.

    env = make_env("cosmos3_robot/MetaWorld-door-open-v3", image_size=128)   # 10 Hz, corner2 camera

Each env is Meta-World's MT1 benchmark of one task (`gymnasium.make("Meta-World/MT1", ...)`), with
its object and goal positions drawn at each reset from the reset seed, the way Meta-World draws
them (`seeded_rand_vec`): a seed names the same episode in every process, and distinct seeds give
distinct episodes. (MT1's own 50 goal variations are drawn once per env instance from an unseeded
global RNG, so a seed picked a different episode in every process.) Our contract on top of it
(`envs/base.py`):

    obs = {"pixels": (H, W, 3) uint8 upright,       Meta-World renders upside down: flipped here
           "agent_pos": (4,) hand xyz + gripper opening,
           "environment_state": (17,) object 1 and 2 pose (xyz + quaternion) + goal xyz}
    info["is_success"]; env.task (an instruction); max_steps; control_hz

Meta-World steps at 80 Hz (timestep 2.5 ms, 5 substeps); one of our steps holds the action for
80 / control_hz of them (10 Hz: 8), so a recorded episode is at the rate our models use. Its
500-step limit becomes 500 / repeat of our steps.

The scripted experts are Meta-World's own (`metaworld.policies.ENV_POLICY_MAP`): proportional
controllers tuned for 80 Hz (gains up to 25 per m, the arm's mocap moving action / 100 m per native
step). Held for 8 native steps their loop gain is 8x larger and some oscillate (handle-press reaches
the handle by chance, after 2 to 62 of our steps). `native_plan` runs the expert at 80 Hz through the
coming step on a snapshot of the simulation and returns its actions; `MetaWorldExpert` holds their
mean, which moves the mocap as far as the 80 Hz expert would have (exactly, unless the mocap's
workspace bound clips some of those actions; the gripper, a position actuator, gets the mean
opening target where the expert would switch it mid-step).
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported (by metaworld)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402

from cosmos3_robot.envs.base import STATE_BOUND, EnvConfig  # noqa: E402

NATIVE_HZ = 80  # Meta-World's control rate: 1 / (0.0025 s timestep x 5 substeps)
NATIVE_MAX_STEPS = 500
CAMERA = "corner2"

# AVDC's 11 tasks (Ko et al. 2023), then reach and push; the instruction each env states.
TASKS: dict[str, str] = {
    "assembly-v3": "put the ring on the peg",
    "basketball-v3": "put the ball into the hoop",
    "button-press-v3": "press the button from the front",
    "button-press-topdown-v3": "press the button from the top",
    "door-close-v3": "close the door",
    "door-open-v3": "open the door",
    "faucet-close-v3": "turn the faucet handle to close it",
    "faucet-open-v3": "turn the faucet handle to open it",
    "hammer-v3": "hammer the nail into the wall",
    "handle-press-v3": "press the handle down",
    "shelf-place-v3": "place the block on the shelf",
    "reach-v3": "reach the goal position",
    "push-v3": "push the puck to the goal",
}
AVDC_TASKS = list(TASKS)[:11]


def env_id(task: str) -> str:
    return f"cosmos3_robot/MetaWorld-{task}"


class MetaWorldEnv(gym.Env):
    """One Meta-World v3 task at our control rate, with upright pixels and our observation dict."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    STATE_DIM, ENV_STATE_DIM, ACTION_DIM = 4, 17, 4
    STATE_NAMES = ["hand_x", "hand_y", "hand_z", "gripper"]
    ENV_STATE_NAMES = [f"obj1_{k}" for k in ("x", "y", "z", "qw", "qx", "qy", "qz")] + [
        f"obj2_{k}" for k in ("x", "y", "z", "qw", "qx", "qy", "qz")
    ] + ["goal_x", "goal_y", "goal_z"]  # fmt: skip
    ACTION_NAMES = ["dx", "dy", "dz", "grip"]

    def __init__(self, task: str, render_mode: str | None = "rgb_array", image_size: int = 128,
                 control_hz: int = 10, camera: str = CAMERA) -> None:  # fmt: skip
        if task not in TASKS:
            raise ValueError(f"unknown Meta-World task {task!r}; this project registers {', '.join(TASKS)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: only 'rgb_array' is supported (offscreen)")
        if NATIVE_HZ % control_hz:
            raise ValueError(
                f"control_hz={control_hz} must divide Meta-World's {NATIVE_HZ} Hz (10, 16, 20, 40, 80)"
            )
        import metaworld  # noqa: F401  (registers Meta-World/MT1)

        self.config = EnvConfig(image_size=image_size, control_hz=10)  # the size check; the rate is ours
        self.task_name, self.render_mode, self.control_hz = task, render_mode, control_hz
        self.repeat = NATIVE_HZ // control_hz
        self.max_steps = NATIVE_MAX_STEPS // self.repeat
        self.metadata = {**type(self).metadata, "render_fps": control_hz}
        self.inner = gym.make("Meta-World/MT1", env_name=task, render_mode="rgb_array", camera_name=camera,
                              width=image_size, height=image_size, disable_env_checker=True)  # fmt: skip
        size = image_size
        self.observation_space = spaces.Dict({
            "pixels": spaces.Box(0, 255, (size, size, 3), np.uint8),
            "agent_pos": spaces.Box(-STATE_BOUND, STATE_BOUND, (self.STATE_DIM,), np.float32),
            "environment_state": spaces.Box(-STATE_BOUND, STATE_BOUND, (self.ENV_STATE_DIM,), np.float32),
        })  # fmt: skip
        self.action_space = spaces.Box(-1.0, 1.0, (self.ACTION_DIM,), np.float32)
        self.task = self.task_description = TASKS[task]
        # One of MT1's tasks sets the task's fixed parameters; each reset then draws the positions
        # from Meta-World's own seeded RNG instead of using that task's frozen ones.
        variations = find_wrapper(self.inner, "RandomTaskSelectWrapper")
        variations.toggle_sample_tasks_on_reset(False)
        u = self.inner.unwrapped
        u.set_task(variations.tasks[0])
        u._freeze_rand_vec, u.seeded_rand_vec = False, True
        self.raw_obs: np.ndarray | None = None  # Meta-World's 39-D observation (the expert reads it)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.inner.unwrapped.seed(int(self.np_random.integers(2**31)))  # its reset ignores `seed`
        self.raw_obs, _ = self.inner.reset()
        self._steps = 0
        return self._observation(), {"is_success": False, "task": self.task}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.ACTION_DIM), -1.0, 1.0)
        reward, success, ended = 0.0, False, False
        for _ in range(self.repeat):
            self.raw_obs, r, term, trunc, info = self.inner.step(action)
            reward += float(r)
            success = bool(info.get("success", 0.0))
            ended = bool(term or trunc)
            if success or ended:
                break
        self._steps += 1
        truncated = (self._steps >= self.max_steps or ended) and not success
        return self._observation(), reward, success, truncated, {"is_success": success, "task": self.task}

    def native_plan(self, controller) -> np.ndarray:
        """The actions (repeat, 4), clipped to [-1, 1], that `controller` (Meta-World's 39-D
        observation -> action) takes at Meta-World's own rate through our next step, simulated on a
        snapshot of the physics that is then restored (the next `step` is unchanged by this call)."""
        if self.raw_obs is None:
            raise RuntimeError("native_plan before reset: reset the env first")
        import mujoco

        u = self.inner.unwrapped
        kind = mujoco.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mujoco.mj_stateSize(u.model, kind))
        mujoco.mj_getState(u.model, u.data, physics, kind)
        prev_obs = u._prev_obs.copy()  # _get_obs shifts it: Meta-World's frame stacking
        space = u.sawyer_observation_space
        obs, actions = self.raw_obs, []
        try:
            for _ in range(self.repeat):
                a = np.clip(np.asarray(controller(obs), dtype=np.float64), -1.0, 1.0)
                actions.append(a)
                u.set_xyz_action(a[:3])
                u.do_simulation([a[-1], -a[-1]], n_frames=u.frame_skip)
                mujoco.mj_forward(u.model, u.data)
                obs = np.clip(u._get_obs(), space.low, space.high)
        finally:
            mujoco.mj_setState(u.model, u.data, physics, kind)
            mujoco.mj_forward(u.model, u.data)
            u._prev_obs = prev_obs
        return np.stack(actions)

    def render(self):
        return np.ascontiguousarray(self.inner.render()[::-1])  # upright: row 0 is the top

    def close(self) -> None:
        self.inner.close()

    def _observation(self) -> dict[str, np.ndarray]:
        o = np.asarray(self.raw_obs, dtype=np.float32)
        return {
            "pixels": self.render(),
            "agent_pos": o[:4].copy(),
            "environment_state": np.concatenate([o[4:18], o[36:39]]),
        }


def find_wrapper(env: gym.Env, name: str) -> gym.Wrapper:
    while isinstance(env, gym.Wrapper):
        if type(env).__name__ == name:
            return env
        env = env.env
    raise RuntimeError(f"Meta-World's MT1 env has no {name}; this code expects metaworld 3.1.1")
