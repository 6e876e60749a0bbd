"""groupcoord: a high-throughput coordinator for Kafka-protocol groups."""
__version__ = "0.1.0"
