"""Metrics from the files programs already write: TensorBoard, Lightning CSV, HF, MLflow, trackio.

One module per format decodes what the target shipped (bytes or rows) into metric points;
`reader.MetricFiles` asks the target's agent for the search (remote/agent_server.py `metric_find`)
and the files' new bytes and rows in one request per poll, and keeps each file's cursor across polls.
"""
