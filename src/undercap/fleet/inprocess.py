"""A Flower Grid that delivers each message to the same ClientApp in this process, one
node after another (`undercap fleet --backend inprocess`): no Ray, for quick runs and
tests. Only the transport differs from Flower's simulation and a SuperLink; simulated
devices keep their own clocks, so a round's time is still the slowest node's.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid


class InProcessGrid(Grid):
    """Nodes 1..N with node configs {partition-id, num-partitions} like Flower's
    simulation gives; each keeps its own Context across rounds."""

    def __init__(self, client_app: Any, num_nodes: int, run_config: Optional[Dict] = None):
        self.client_app = client_app
        self._contexts = {
            nid: Context(
                run_id=1,
                node_id=nid,
                node_config={"partition-id": nid - 1, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
            for nid in range(1, num_nodes + 1)
        }
        self._replies: Dict[str, Message] = {}
        self._run: Any = None
        self._next = 0

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: Optional[float] = None,
    ) -> Message:
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            self._next += 1
            msg_id = f"m{self._next}"
            # the reply's src_node_id is the message's dst_node_id (Message(reply_to=))
            self._replies[msg_id] = self.client_app(msg, self._contexts[msg.metadata.dst_node_id])
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: Optional[float] = None
    ) -> Iterable[Message]:
        return list(self.pull_messages(self.push_messages(messages)))
