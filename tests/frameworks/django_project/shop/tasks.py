try:
    from django.tasks import task
except ImportError:  # Django < 6: the django-tasks backport
    from django_tasks import task

from shop.models import Order


class DeclinedError(Exception):
    pass


@task
def send_receipt(order_id):
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return f"receipt for order {order_id}"


@task(takes_context=True)
async def add(context, a, b):
    return {"sum": a + b, "attempt": context.attempt, "id": context.task_result.id}


@task
def explode():
    raise DeclinedError("card declined")


@task(queue_name="mail")
def shout(text):
    return text.upper()


@task(backend="retrying")
def flaky(n):
    raise DeclinedError(f"declined {n}")
