package nodeagent

// ProcessAlive lets the external tests check that a process is gone.
var ProcessAlive = processAlive
