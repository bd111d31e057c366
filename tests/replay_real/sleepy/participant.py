"""A participant that reads the clock and sleeps the way a careless one would (test input)."""

import asyncio
import threading
import time


async def sleeps_in_wall_time(seconds):
    time.sleep(seconds)


async def blocks_the_loop(seconds):
    threading.Event().wait(seconds)  # a blocking wait the time proxy cannot see


async def reads_wall_time():
    before = time.time()
    await asyncio.sleep(30)
    return before, time.time(), time.monotonic()
