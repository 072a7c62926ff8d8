"""The typed run and its arithmetic: report.json's models (`run`), the rollout's (`rollout`), the
plan of windows, percentiles and bootstrap intervals (`stats`), the SLO gates, labels. No
locust, no servers, no TensorFlow: everything else in `graphserve.loadtest` builds on these."""
