"""Follow: a class watches one lecturer's run, live, without running the model.

    classroom.py  codes, the lecturer key, caps and rate limits; publish (lecturer) and read (followers)
    wire.py       a StepTrace and the run around it as JSON, and back (never pickle)
    store.py      where the state lives: this process (MemoryKV) or Redis (DECODE_LAB_REDIS_URL)
    share.py      what the lecturer's run publishes, and the QR code of a follow link

A follower's update is a read of the shared record and a drawing of it: no forward pass, no re-tracing.
A fork replays the same prompt and settings for the same number of steps in the student's own session,
which gives the same tokens (greedy, or sampled with the same seed) and leaves the lecturer's run alone.
"""

from engine.follow.classroom import Classroom, Lecture, Limits, Refused  # noqa: F401
from engine.follow.store import MemoryKV, StoreDown  # noqa: F401
from engine.follow.wire import SharedRun, WireError  # noqa: F401
