"""Follow the lecturer: /?follow=CODE shows the lecturer's current step, live, without running the model.

Thin page: ui/follow.py places what engine/follow shares (the lecturer's recorded steps).
"""

from ui.follow import follower_page
from ui.frame import frame

frame(__file__)
follower_page()
