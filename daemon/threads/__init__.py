"""Open threads: the agent's promises, the person's unanswered questions and dated plans."""

from daemon.threads.book import Thread, ThreadBook
from daemon.threads.detect import Found

__all__ = ["Found", "Thread", "ThreadBook"]
