"""The class predicts before the reveal: one question at a time, answered anonymously, counted live.

    next_token_question(held, context)   "what comes next?": the model's top candidates, shuffled, no probabilities
    shape_question(held, before)         "what is K's shape after this step?": the answer read off the trace
    Polls.ask(lecture, question)         open it (a new question replaces the last; its votes are cleared)
    Polls.vote(code, who, qid, ...)      one per follower per question; a plain message when refused
    Polls.tally(code)                    counts per choice and the words typed, never who voted what
    Polls.reveal(lecture)                close it: the answer and the model's probabilities go to the class

Peer instruction asks for a prediction before showing the answer. The step the question is about is taken
when the question is asked and held back (classroom/publisher.py publishes nothing past it), so the
candidates are exactly the distribution the revealed step chose from.

A vote is a choice, or one typed word (letters, digits, an inner ' or -; at most 40 characters). Anything
else is refused with a plain message, never stored: markup, long strings, a vote after the reveal, a
second vote, a vote for an ended class. Votes are keyed by the follower's random session id (never a
name), rate-limited like wrong codes, and capped at the class's size.
"""

from __future__ import annotations

import random
import re
import secrets

from classroom import wire
from classroom.poll_draw import poll_html
from classroom.store import StoreDown
from drawing.palette import show_piece

CHOICES = 5  # candidates offered for the next token
MAX_WORD = 40  # characters in a typed word
MAX_CHOICE = 200  # characters in a choice as sent back (a shape, a token)
WORD_RE = re.compile(r"^[^\W_]+(?:['’\-][^\W_]+)*$")
SHOWN_WORDS = 8  # typed words on the projector
VOTES_PER_MINUTE = 10  # vote attempts per follower (right or wrong)


class Refused(Exception):
    """A vote turned down, with a message for the student (plain text)."""


def _piece(token: str) -> str:
    """A candidate as a student reads it: the token's text, spaces shown (drawing.palette.show_piece)."""
    return show_piece(token)


def next_token_question(held, context: str, rng: random.Random | None = None) -> dict:
    """'What comes next?' for the held step `held` (a StepTrace): its top candidates, shuffled; the probability of
    each in the distribution the step chose from (after the sampling settings: a token top-k left out is 0) kept for
    the reveal, so the model's figure never gives odds to a token the step could not choose."""
    seen, choices, model = set(), [], {}
    for c in held.top:
        shown = _piece(c.token)
        if shown in seen:
            continue
        seen.add(shown)
        choices.append(shown)
        model[shown] = round(float(c.p_after), 6)
        if len(choices) == CHOICES:
            break
    answer = _piece(held.token)
    if answer not in model:  # sampled from outside the top candidates: it is still a choice, with its own odds
        chosen = [c.p_after for c in held.top if _piece(c.token) == answer]  # the trace keeps the chosen token's
        choices[-1:] = [answer]
        model = {c: model[c] for c in choices[:-1]} | {answer: round(float(chosen[0]), 6) if chosen else 0.0}
    (rng or random.Random(secrets.randbits(32))).shuffle(choices)
    return {"kind": "next", "text": "What token comes next? Pick one, or type a word.", "context": context,
            "choices": choices, "typed": True, "answer": answer, "model": model}


def shape_question(held, before, rng: random.Random | None = None) -> dict:
    """"What is K's shape after this step?" for layer 0's keys; the answer is the shape the trace measured, the
    other choices the usual slips (the shape before the step, one position only, query heads for K/V heads: on a
    model with as many K/V heads as query heads, which has no such slip, one position too many)."""
    shapes = held.layers[0].shapes  # with the cache off nothing is kept: K is what the pass computed
    shape = list(shapes.get("kv.keys") or shapes["attn.k"])  # [batch, kv_head, pos, head_dim]
    batch, kv_heads, pos, head_dim = shape
    heads = shapes.get("attn.q", shape)[1]
    slips = [[batch, kv_heads, max(1, pos - held.q_len), head_dim], [batch, kv_heads, 1, head_dim],
             [batch, heads, pos, head_dim] if heads != kv_heads else [batch, kv_heads, pos + 1, head_dim],
             [batch, kv_heads, head_dim, pos]]
    choices = []
    for s in [shape] + slips:
        text = "[" + ", ".join(str(d) for d in s) + "]"
        if text not in choices:
            choices.append(text)
    answer = choices[0]
    (rng or random.Random(secrets.randbits(32))).shuffle(choices)
    return {"kind": "shape", "text": f"What is K's shape after this step? (layer 0's keys: [batch, kv_head, pos, "
                                     f"head_dim]; before it, the model had seen {before.kv_len} positions)",
            "context": "", "choices": choices, "typed": False, "answer": answer, "model": {}}


def check_word(word: str) -> str:
    """A typed answer as stored, or Refused: one plain word, nothing a page could read as markup."""
    if not isinstance(word, str) or len(word) > MAX_WORD:
        raise Refused(f"That answer is too long: type one word (at most {MAX_WORD} characters), or pick a choice.")
    word = word.strip()
    if not word:
        raise Refused("Type a word, or pick one of the choices.")
    if not WORD_RE.match(word):
        raise Refused("Type one plain word: letters and digits (an ' or - inside a word is fine), no spaces "
                      "or symbols.")
    return word


class Polls:
    """The question of each class, in the classroom's store (one open question per class at a time)."""

    def __init__(self, room):
        self.room = room

    def _get(self, code: str) -> dict | None:
        raw = self.room._call(self.room.kv.get, self.room._k(code, "poll"))
        return wire.loads(raw) if raw else None

    def current(self, code: str) -> dict | None:
        """The whole question, answer included (the lecturer's page only)."""
        return self._get(code)

    def public(self, code: str) -> dict | None:
        """What a follower may see: while open, no answer and no probabilities; after the reveal, everything."""
        q = self._get(code)
        if q is None:
            return None
        if q["open"]:
            return {k: q[k] for k in ("qid", "kind", "text", "context", "choices", "typed", "open", "at") if k in q}
        return q

    def ask(self, lecture, question: dict) -> str:
        """Open `question` (next_token_question or shape_question) for the class; returns its id."""
        room = self.room
        room._check(lecture)
        qid = secrets.token_hex(4)
        room._call(room.kv.delete, room._k(lecture.code, "votes"))
        room._call(room.kv.set, room._k(lecture.code, "poll"), wire.dumps({**question, "qid": qid, "open": True}),
                   ex=room._ttl)
        return qid

    def drop(self, lecture) -> None:
        """No question any more (the lecturer moved on without a reveal)."""
        room = self.room
        room._check(lecture)
        room._call(room.kv.delete, room._k(lecture.code, "poll"), room._k(lecture.code, "votes"))

    def vote(self, code: str, who: str, qid: str, choice: str | None = None, word: str | None = None) -> str:
        """One follower's answer to the open question: a choice, or a typed word. Returns what the student
        reads; Refused (a plain message) when the vote is not counted."""
        room, lim = self.room, self.room.limits
        try:
            if not isinstance(code, str) or room._call(room.kv.get, room._k(code)) is None:
                raise Refused("This class has ended: your vote was not counted.")
            if not isinstance(who, str) or not room.is_follower(code, who):
                raise Refused("Open the class's link again to vote.")
            if room._over(f"vote:{who}", VOTES_PER_MINUTE) or \
                    room._over(f"vote:{code}", max(120, 3 * lim.max_followers)):
                raise Refused("Too many votes from here: wait a minute.")
            room._hit(f"vote:{who}")
            room._hit(f"vote:{code}")
            q = self._get(code)
            if q is None or qid != q.get("qid"):
                raise Refused("That question is no longer open.")
            if not q["open"]:
                raise Refused("Voting closed when the lecturer revealed the answer.")
            if choice is not None:
                if not isinstance(choice, str) or len(choice) > MAX_CHOICE or choice not in q["choices"]:
                    raise Refused("That is not one of the choices.")
                stored = {"c": choice}
            elif word is not None and q.get("typed"):
                word = check_word(word)
                match = next((c for c in q["choices"] if c.strip("·␣ ").lower() == word.lower()), None)
                stored = {"c": match} if match else {"w": word.lower()}
            else:
                raise Refused("Pick one of the choices.")
            votes = room._k(code, "votes")
            if room._call(room.kv.hget, votes, who) is not None:
                raise Refused("You have voted on this question already.")
            if room._call(room.kv.hlen, votes) >= lim.max_followers:
                raise Refused("This question has all the votes it can take.")
            if not room._call(room.kv.hsetnx, votes, who, wire.dumps(stored)):
                raise Refused("You have voted on this question already.")
            room._call(room.kv.expire, votes, room._ttl)
        except StoreDown:
            raise Refused("Your vote could not be counted right now: try again in a moment.") from None
        return "Your vote is in. Watch the projector for the reveal."

    def tally(self, code: str) -> dict:
        """{"qid", "total", "counts": {choice: n} (every choice, in the question's order), "words": [[word, n]]}."""
        room = self.room
        q = self._get(code)
        if q is None:
            return {"qid": None, "total": 0, "counts": {}, "words": []}
        counts = {c: 0 for c in q["choices"]}
        words: dict[str, int] = {}
        for raw in room._call(room.kv.hgetall, room._k(code, "votes")).values():
            v = wire.loads(raw)
            if v.get("c") in counts:
                counts[v["c"]] += 1
            elif isinstance(v.get("w"), str):
                words[v["w"]] = words.get(v["w"], 0) + 1
        top = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN_WORDS]
        return {"qid": q["qid"], "total": sum(counts.values()) + sum(words.values()), "counts": counts,
                "words": [list(w) for w in top]}

    def reveal(self, lecture) -> dict | None:
        """Close the open question; what it becomes (answer, model probabilities, the counts) for everyone."""
        room = self.room
        room._check(lecture)
        q = self._get(lecture.code)
        if q is None or not q["open"]:
            return q
        tally = self.tally(lecture.code)
        done = {**q, **tally, "open": False, "html": poll_html(q, tally, revealed=True)}
        room._call(room.kv.set, room._k(lecture.code, "poll"), wire.dumps(done), ex=room._ttl)
        return done
