"""Sum of the 'amount' field per 'user' over JSON lines or CSV rows (user, amount)."""

from hop import Job


class AmountPerUser(Job):
    input_format = "jsonl"

    def map(self, offset, record):
        if isinstance(record, dict):
            yield record["user"], record["amount"]
        else:
            yield record[0], int(record[1])

    def combine(self, user, amounts):
        yield user, sum(amounts)

    reduce = combine
