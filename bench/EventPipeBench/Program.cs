// SPDX-License-Identifier: MIT
//
// The .NET EventPipe contender of the side-by-side comparison. The session is
// not started here: scripts/bench-eventpipe.sh starts a file-streaming
// EventPipe session through the DOTNET_EnableEventPipe environment variables
// (or none, for the disabled rows), and this program writes the same 32-byte
// event as the C benchmarks and times itself.
//
//   EventPipeBench producer THREADS EVENTS REPS
//       a warm-up of EVENTS (JIT tiers, EventPipe's buffers), then REPS repetitions of THREADS threads
//       (pinned one per CPU) writing EVENTS events each; median, min and max
//       of the per-repetition mean ns/event per thread.
//   EventPipeBench burst THREADS TOTAL
//       THREADS pinned threads write TOTAL events together as fast as they
//       can; prints the wall-clock time of the first write (the script times
//       until the process exited, which is when the runtime has written the
//       end of the trace).
//
// Output: "key value" lines for scripts/run-bench.sh.
using System;
using System.Diagnostics;
using System.Diagnostics.Tracing;
using System.Globalization;
using System.IO;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

[EventSource(Name = "Ringpipe-Bench")]
sealed class BenchSource : EventSource
{
    public static readonly BenchSource Log = new BenchSource();

    // The payload is laid out as ringpipe's: u64 counter, u32 thread, u32
    // extra, then "ringpip" in UTF-16 with its NUL (16 bytes): 32 bytes.
    // WriteEventCore, because no WriteEvent overload takes (long, int, int,
    // string): the params object[] fallback would box and allocate on every
    // call, which no performance-minded user would ship.
    // The check inlines into the caller, as in the usual EventSource pattern,
    // so a disabled event costs a field load and a branch; the writing path
    // is a separate method (stackalloc keeps a method from being inlined).
    [Event(1, Level = EventLevel.Informational)]
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Small(long counter, int thread, int extra, string name)
    {
        if (IsEnabled())
            WriteSmall(counter, thread, extra, name);
    }

    [NonEvent]
    [MethodImpl(MethodImplOptions.NoInlining)]
    unsafe void WriteSmall(long counter, int thread, int extra, string name)
    {
        fixed (char* s = name)
        {
            EventData* d = stackalloc EventData[4];
            d[0].DataPointer = (IntPtr)(&counter);
            d[0].Size = 8;
            d[1].DataPointer = (IntPtr)(&thread);
            d[1].Size = 4;
            d[2].DataPointer = (IntPtr)(&extra);
            d[2].Size = 4;
            d[3].DataPointer = (IntPtr)s;
            d[3].Size = (name.Length + 1) * 2;
            WriteEventCore(1, 4, d);
        }
    }
}

static class Program
{
    const string Name = "ringpip";

    [DllImport("libc", SetLastError = true)]
    static extern int sched_setaffinity(int pid, IntPtr cpusetsize, ref ulong mask);

    static int[] cpus = new int[2];
    static int nrCpus;

    static void Pin(int cpu)
    {
        ulong mask = 1UL << cpu;
        sched_setaffinity(0, (IntPtr)8, ref mask);   // 0: the calling thread
    }

    // The timed loop, compiled fully optimized at once rather than through
    // the tiers (it is called only a few times).
    [MethodImpl(MethodImplOptions.AggressiveOptimization | MethodImplOptions.NoInlining)]
    static void WriteLoop(long n, int thread)
    {
        var log = BenchSource.Log;
        for (long i = 1; i <= n; i++)
            log.Small(i, thread, 0, Name);
    }

    // threads pinned writers of n events each; mean per-thread ns/event.
    // firstWallTicks: DateTime.UtcNow ticks just before the first write.
    static double RunWriters(int threads, long n, out long firstWallTicks, out double writeSecs)
    {
        var barrier = new Barrier(threads);
        var t0 = new long[threads];
        var t1 = new long[threads];
        var wall = new long[threads];
        var th = new Thread[threads];
        for (int t = 0; t < threads; t++)
        {
            int idx = t;
            th[t] = new Thread(() =>
            {
                Pin(cpus[idx % nrCpus]);
                barrier.SignalAndWait();
                wall[idx] = DateTime.UtcNow.Ticks;
                t0[idx] = Stopwatch.GetTimestamp();
                WriteLoop(n, idx);
                t1[idx] = Stopwatch.GetTimestamp();
            });
            th[t].Start();
        }
        double sum = 0;
        long first = long.MaxValue, last = long.MinValue, firstWall = long.MaxValue;
        for (int t = 0; t < threads; t++)
        {
            th[t].Join();
            sum += (t1[t] - t0[t]) * (1e9 / Stopwatch.Frequency) / n;
            first = Math.Min(first, t0[t]);
            last = Math.Max(last, t1[t]);
            firstWall = Math.Min(firstWall, wall[t]);
        }
        firstWallTicks = firstWall;
        writeSecs = (last - first) / (double)Stopwatch.Frequency;
        return sum / threads;
    }

    static string Status(string key)
    {
        foreach (var line in File.ReadAllLines("/proc/self/status"))
            if (line.StartsWith(key + ":", StringComparison.Ordinal))
                return line.Substring(key.Length + 1).Trim().Split(' ')[0];
        return "0";
    }

    static string F(double v) => v.ToString("F2", CultureInfo.InvariantCulture);

    static int Usage()
    {
        Console.Error.WriteLine("usage: EventPipeBench producer THREADS EVENTS REPS | burst THREADS TOTAL");
        return 2;
    }

    static int Main(string[] args)
    {
        if (args.Length < 3)
            return Usage();
        int threads = int.Parse(args[1], CultureInfo.InvariantCulture);
        if (threads < 1 || threads > 2)
            return Usage();
        int online = Environment.ProcessorCount;
        for (int c = 0; c < 64 && nrCpus < 2 && c < online; c++)
            cpus[nrCpus++] = c;

        Console.WriteLine("runtime " + Environment.Version);
        Console.WriteLine("enabled " + (BenchSource.Log.IsEnabled() ? 1 : 0));
        long wallFirst;
        double writeSecs;
        if (args[0] == "producer" && args.Length == 4)
        {
            long n = long.Parse(args[2], CultureInfo.InvariantCulture);
            int reps = int.Parse(args[3], CultureInfo.InvariantCulture);
            if (n < 1 || reps < 1)
                return Usage();
            RunWriters(threads, n, out wallFirst, out writeSecs);   // warm-up
            var v = new double[reps];
            for (int k = 0; k < reps; k++)
                v[k] = RunWriters(threads, n, out wallFirst, out writeSecs);
            Array.Sort(v);
            double med = reps % 2 == 1 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
            Console.WriteLine("ns_med " + F(med));
            Console.WriteLine("ns_min " + F(v[0]));
            Console.WriteLine("ns_max " + F(v[reps - 1]));
            Console.WriteLine("attempted " + ((n + n * reps) * threads).ToString(CultureInfo.InvariantCulture));
        }
        else if (args[0] == "burst" && args.Length == 3)
        {
            long total = long.Parse(args[2], CultureInfo.InvariantCulture);
            if (total < threads)
                return Usage();
            RunWriters(threads, total / threads, out wallFirst, out writeSecs);
            // Unix epoch nanoseconds, comparable with `date +%s%N` in the script
            long unixNs = (wallFirst - DateTime.UnixEpoch.Ticks) * 100;
            Console.WriteLine("attempted " + (total / threads * threads).ToString(CultureInfo.InvariantCulture));
            Console.WriteLine("first_write_unix_ns " + unixNs.ToString(CultureInfo.InvariantCulture));
            Console.WriteLine("write_secs " + writeSecs.ToString("F6", CultureInfo.InvariantCulture));
        }
        else
        {
            return Usage();
        }
        Console.WriteLine("rss_kb " + Status("VmRSS"));
        Console.WriteLine("hwm_kb " + Status("VmHWM"));
        return 0;
    }
}
