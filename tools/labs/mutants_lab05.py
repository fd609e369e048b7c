"""Plausible wrong answers to lab 05 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_TP = """
import queue, threading
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
        self.source, self.depth = source, depth

    def __iter__(self):
        q = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def put(item):
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def produce():
            try:
                for item in self.source:
                    if not put(("item", item)):
                        return
                put(("end", None))
            except BaseException as exc:
                put(("error", exc))

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            while True:
                kind, value = q.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            stop.set()
            thread.join()
"""


def _tp(old: str, new: str) -> str:
    assert old in _TP, old
    return _TP.replace(old, new)


MUTANTS = [
    Mutant("q1_order", "an unbounded queue", _tp("queue.Queue(maxsize=self.depth)", "queue.Queue()"),
           expect="bounded"),
    Mutant("q1_order", "depth not checked", _tp("""        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
""", ""), expect="must raise ValueError"),
    Mutant("q1_order", "one pass only: the thread started in __init__", """
import queue, threading
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
        self.q = queue.Queue(maxsize=depth)
        def produce():
            for item in source:
                self.q.put(("item", item))
            self.q.put(("end", None))
        threading.Thread(target=produce, daemon=True).start()

    def __iter__(self):
        while True:
            kind, value = self.q.get()
            if kind == "end":
                return
            yield value
""", expect="starts a new pass|hand over each batch|once each"),
    Mutant("q1_exceptions", "the source's exception swallowed", _tp("""            except BaseException as exc:
                put(("error", exc))""", """            except BaseException:
                put(("end", None))"""), expect="ended without an error"),
    Mutant("q1_exceptions", "a new RuntimeError raised instead of the source's", _tp(
        "                    raise value", "                    raise RuntimeError(str(value))"),
        expect="own exception object"),
    Mutant("q1_exceptions", "a copy of the exception raised (the source's frame lost)", _tp(
        "                    raise value", "                    raise type(value)(*value.args)"),
        expect="raise the original exception object"),
    Mutant("q1_no_leaked_threads", "a blocking put that never sees the stop event", _tp("""            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False""", """            q.put(item)
            return True"""), expect="still running"),
    Mutant("q1_no_leaked_threads", "no stop event set when the consumer leaves", _tp("""        finally:
            stop.set()
            thread.join()""", """        finally:
            pass"""), expect="still running"),
    Mutant("q1_no_leaked_threads", "the stop event set only on a normal end", _tp("""                if kind == "end":
                    return""", """                if kind == "end":
                    stop.set()
                    return""").replace("""        finally:
            stop.set()
            thread.join()""", """        finally:
            pass"""), expect="still running"),
    Mutant("q1_overlap", "loading on demand in the consumer", """
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
        self.source = source

    def __iter__(self):
        yield from self.source
""", expect="hid only|still running|once each"),
    Mutant("q1_overlap", "the thread joined before each item is handed over", """
import threading
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
        self.source = source

    def __iter__(self):
        it = iter(self.source)
        while True:
            box = {}
            def load():
                try:
                    box["item"] = next(it)
                except StopIteration:
                    box["end"] = True
                except BaseException as e:
                    box["error"] = e
            t = threading.Thread(target=load)
            t.start()
            t.join()  # waits for the load: nothing overlaps
            if "end" in box:
                return
            if "error" in box:
                raise box["error"]
            yield box["item"]
""", expect="hid only"),
    Mutant("q1_overlap", "a producer that loads only when asked", """
import queue, threading
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError("depth")
        self.source = source

    def __iter__(self):
        asks, q, stop = queue.Queue(), queue.Queue(), threading.Event()
        def produce():
            it = iter(self.source)
            while not stop.is_set():
                try:
                    asks.get(timeout=0.05)
                except queue.Empty:
                    continue
                try:
                    q.put(("item", next(it)))
                except StopIteration:
                    q.put(("end", None))
                    return
                except BaseException as e:
                    q.put(("error", e))
                    return
        t = threading.Thread(target=produce, daemon=True)
        t.start()
        try:
            while True:
                asks.put(1)
                kind, value = q.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            stop.set()
            t.join()
""", expect="hid only"),
    Mutant("q1_overlap", "an empty queue taken for the end: a slow source's loop ends early "
           "(fast, and short of items)", _tp("""                kind, value = q.get()""",
                                             """                try:
                    kind, value = q.get(timeout=0.01)
                except queue.Empty:
                    return"""), expect="the timed loop got"),
    Mutant("q2_hidden_fraction", "divided by max(load, compute)", """
def hidden_fraction(serial_s, prefetched_s, load_s, compute_s):
    if min(load_s, compute_s) <= 0:
        raise ValueError("bad")
    return (serial_s - prefetched_s) / max(load_s, compute_s)
""", expect=r"\(serial - prefetched\) / min\(load, compute\)"),
    Mutant("q2_hidden_fraction", "divided by the serial time", """
def hidden_fraction(serial_s, prefetched_s, load_s, compute_s):
    if min(load_s, compute_s) <= 0:
        raise ValueError("bad")
    return (serial_s - prefetched_s) / serial_s
""", expect=r"\(serial - prefetched\) / min\(load, compute\)"),
    Mutant("q2_hidden_fraction", "no error when there is nothing to hide", """
def hidden_fraction(serial_s, prefetched_s, load_s, compute_s):
    m = min(load_s, compute_s)
    return (serial_s - prefetched_s) / m if m else 0.0
""", expect="must raise ValueError"),
]
