"""Follow the lecturer: /?follow=CODE shows the lecturer's current step, live, without running the model.

Thin page: classroom/page.py places what classroom shares (the lecturer's recorded steps).
"""

from classroom.page import follower_page
from ui.setup import page_setup

page_setup("follow")
follower_page()
