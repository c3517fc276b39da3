"""Follow: a class watches one lecturer's screen, live, without running the model or a script per student.

    lectures.py   codes, the lecturer key (a reload resumes the class), caps and rate limits; publish and read
    poll.py       the class predicts: questions built from the held step, votes (anonymous, one each), the reveal
    frames.py     what a follower is shown: a step's manifest, its stage and views as bytes (views.py's builders)
    publisher.py  what the lecturer's step page publishes, and the QR code of a follow link
    wire.py       a StepTrace and the run around it as JSON, and back (never pickle)
    store.py      where the state lives: this process (MemoryKV) or Redis; publish/subscribe for the news
    hub.py        one server's side: hears each version, builds its pictures once, pushes one event to every stream
    http.py       the class's routes in front of Streamlit (events, pictures, votes); server.py: this process's pair

A follower's update is one event on a stream its page holds open, and pictures built once per server from
the shared record: no forward pass, no re-tracing, no Python run per student. A fork replays the same prompt
and settings for the same number of steps in the student's own session, which gives the same tokens (greedy,
or sampled with the same seed) and leaves the lecturer's run alone.
"""

from classroom.lectures import Classroom, Lecture, Limits, Refused  # noqa: F401
from classroom.store import MemoryKV, StoreDown  # noqa: F401
from classroom.wire import SharedRun, WireError  # noqa: F401
