"""An example FastAPI app that hands work to Conveyor.

Run it from this directory, in three terminals, on the embedded Redis (as in Getting started;
with a Redis of your own, export one CONVEYOR_REDIS_URL for every side instead):

    conveyor redis                        # the embedded Redis (Ctrl-C stops it)
    uvicorn thumbnails:app                # the web app
    conveyor worker thumbnails:tasks -v   # a worker, as many as you like

`pytest examples/fastapi_app` tests it against a private Redis (Conveyor's pytest plugin).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel

from conveyor import AsyncQueue, Queue, Tasks
from conveyor.integrations.asgi import ConveyorLifespan
from conveyor.worker import current_job

tasks = Tasks("thumbnails")  # Redis from CONVEYOR_REDIS_URL, else the embedded one


@tasks.task(max_failures=3, timeout=60)
async def thumbnail(data: dict[str, Any]) -> dict[str, Any]:
    current_job().progress(1.0)
    return {"thumbnail": f"thumbs/{data['size']}/{data['path']}"}


conveyor = ConveyorLifespan(tasks)
app = FastAPI(lifespan=conveyor)

Jobs = Annotated[AsyncQueue, Depends(conveyor.async_queue())]
SyncJobs = Annotated[Queue, Depends(conveyor.queue())]


class ThumbnailRequest(BaseModel):
    path: str
    size: int = 128


@app.post("/thumbnails", status_code=202)
async def create_thumbnail(request: ThumbnailRequest, jobs: Jobs) -> dict[str, str]:
    job = await jobs.enqueue(thumbnail.name, request.model_dump())
    return {"id": job.id}


@app.get("/thumbnails/{job_id}")
async def thumbnail_status(job_id: str, jobs: Jobs) -> dict[str, Any]:
    job = await jobs.get(job_id)  # None for any id that is no job's, even a malformed one
    if job is None:
        raise HTTPException(status_code=404, detail="no such job")
    return {"state": job.state, "progress": job.progress, "result": job.result}


@app.get("/queue")
def queue_counts(jobs: SyncJobs) -> dict[str, int]:  # a `def` endpoint: the sync Queue
    return {state.value: count for state, count in jobs.counts().items()}
