/* SPDX-License-Identifier: MIT */
/*
 * The demo runtime's System.Diagnostics.Metrics instruments: the GC figures
 * a .NET 9 runtime publishes in its "System.Runtime" meter, taken from the
 * heap model, through libringpipe's public counters API.
 */
#ifndef RINGPIPE_DEMO_METRICS_H
#define RINGPIPE_DEMO_METRICS_H

/*
 * Defines the instruments (once; later calls only resume them). They cost
 * nothing until a tool such as dotnet-counters asks for System.Runtime.
 * 0, or a negative errno with rp_last_error() saying why.
 */
int demo_metrics_start(void);
/* Stops reporting (the instruments live on with the process: they report
 * nothing until demo_metrics_start() again). */
void demo_metrics_stop(void);

#endif /* RINGPIPE_DEMO_METRICS_H */
