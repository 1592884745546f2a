"""Record --concurrency auto readings from a real worker on this machine:
CPU jobs in child processes beside I/O jobs. Prints JSON of (limit, host, own, running)."""
import json, socket, subprocess, sys, threading, time
sys.path[:0] = ["tests", "src"]
from conveyor.client.tasks import Tasks
from conveyor.worker import Worker, WorkerSettings
from support import process_app
from support.workers import RunningWorker


def main():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        tasks = Tasks("trace", url=url)
        tasks.handlers.update(process_app.tasks.handlers)
        q = tasks.queue()
        q.enqueue_many([("cpu", 300_000) if i % 4 == 0 else ("sleeps", 0.05) for i in range(3000)])
        w = RunningWorker(Worker(tasks, url=url, settings=WorkerSettings(
            auto_concurrency=True, min_concurrency=1, max_concurrency=12, processes=2, idle_wait=30)))
        time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 15)
        auto = w.worker._auto
        trace = [[limit, round(r.host, 3), round(r.own, 3), r.running] for _, limit, r in auto.history]
        w.stop()
        print(json.dumps(trace))
    finally:
        server.terminate()

if __name__ == '__main__':
    main()
