"""The embedded default behind `muster run`: a loopback NATS server, every service as its own
process, and a driver that replays a scenario through the gateway while showing progress."""
