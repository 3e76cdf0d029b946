@echo off
rem kubectl (1.26 and later) completes the arguments of a plugin kubectl-NAME by running
rem kubectl_complete-NAME from PATH, which on Windows finds this batch file; the plugin
rem answers through cobra's __complete, so the names it offers come from the cluster.
kubectl captf __complete %*
