"""`quiet_writer` keeps FFmpeg's per-video lines out of a command's progress bar."""

from __future__ import annotations

import numpy as np
import pytest

from cosmos3_robot.datasets.writer import ffmpeg_log_level, quiet_writer

av = pytest.importorskip("av")


def write_faststart_mp4(path) -> None:
    """What LeRobot's encoder does per episode: an mp4 with the moov atom moved to the front (FFmpeg
    logs "Starting second pass" at INFO), then FFmpeg's default log callback restored."""
    container = av.open(str(path), "w", options={"movflags": "faststart"})
    stream = container.add_stream("mpeg4", 10)
    stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
    for i in range(3):
        frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
        frame.pts = i
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)
    container.close()
    av.logging.restore_default_callback()


def test_quiet_writer_silences_ffmpeg_default_callback_and_restores_level(tmp_path, capfd):
    libav = ffmpeg_log_level()
    assert libav is not None, "PyAV's bundled libavutil was not found"
    before = libav.av_log_get_level()
    write_faststart_mp4(tmp_path / "warm.mp4")  # installs FFmpeg's default callback
    capfd.readouterr()
    write_faststart_mp4(tmp_path / "loud.mp4")
    assert "Starting second pass" in capfd.readouterr().err  # the line this guards against
    with quiet_writer():
        write_faststart_mp4(tmp_path / "a.mp4")
        write_faststart_mp4(tmp_path / "b.mp4")
    assert "Starting second pass" not in capfd.readouterr().err
    assert libav.av_log_get_level() == before
