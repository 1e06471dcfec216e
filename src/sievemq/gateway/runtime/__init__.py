"""The node: stream appenders, resource alarms, the process-wide state of a running gateway."""
