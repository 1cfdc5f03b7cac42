"""Feedback on served answers: what Chat and ``/v1`` answered (conversation logging is opt-in),
the ratings and corrections people give them, kept per adapter version in the home folder."""
