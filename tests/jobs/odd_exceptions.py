"""Jobs whose code raises exceptions that are awkward to report: no ``Exception`` subclass (an
``asyncio.CancelledError``, a job's own ``BaseException``), one whose ``str()`` itself raises, one with a huge
message; and a map whose value holds itself. Each at the word ``boom``."""

import asyncio

from hop import Job


class CancelledInMap(Job):
    """``asyncio.CancelledError`` (a ``BaseException``) out of the map, as a map running an event loop may raise."""

    def map(self, offset, line):
        for word in line.split():
            if word == "boom":
                raise asyncio.CancelledError("the map's request was cancelled")
            yield word, 1

    def reduce(self, key, values):
        yield key, sum(values)


class CancelledInSetup(CancelledInMap):
    """``asyncio.CancelledError`` out of ``setup``."""

    def setup(self):
        raise asyncio.CancelledError("the setup's request was cancelled")


class Halt(BaseException):
    """A job's own exception deriving from ``BaseException``."""


class HaltsInReduce(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, key, values):
        if key == "boom":
            raise Halt("the reduce halted")
        yield key, sum(values)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("this error cannot say what it is")


class UnprintableInMap(Job):
    """A map raising an exception whose ``str()`` raises."""

    def map(self, offset, line):
        for word in line.split():
            if word == "boom":
                raise Unprintable()
            yield word, 1


class HugeMessage(Job):
    """A map raising an error whose message is 5,000,000 characters (as one quoting a whole huge line would)."""

    def map(self, offset, line):
        for word in line.split():
            if word == "boom":
                raise ValueError("cannot parse " + "x" * 5_000_000)
            yield word, 1


class HoldsItself(Job):
    """A map yielding a list that holds itself, which msgpack cannot encode."""

    def map(self, offset, line):
        for word in line.split():
            value = [word]
            if word == "boom":
                value.append(value)
            yield word, value
