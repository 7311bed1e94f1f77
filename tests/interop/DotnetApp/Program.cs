// DotnetApp: a traced target for ringpipe's interop tests.
//
//   dotnet DotnetApp.dll [--rate N] [--duration SECONDS] [--spin] [--exit-code N]
//
// Prints "pid <N>" on its first line, then writes the "Tick" event of the
// EventSource "Ringpipe-DotnetApp" N times per second (default 20) for the
// given duration (default 10 s; 0 runs until killed), with a counter that
// starts at 1. Once a second it forces a garbage collection so that runtime
// GC events (keyword 0x1) appear in a trace too. At the end it prints
// "ticks <count>", the number of Tick events it wrote.
//
// --spin adds two threads named "spin" that burn CPU for CPU-profile tests:
// each spends three quarters of its time in Hot.SpinFibonacci (recursive)
// and a quarter in Warm.SumSquares (a loop), so that a profile of all
// threads shows SpinFibonacci as the hottest method (about half of all
// thread time; the sleeping main thread holds a third) and SumSquares below
// it. The output is the same.
//
// Exit status: N given by --exit-code (default 0), or 2 on bad usage.

using System;
using System.Diagnostics;
using System.Diagnostics.Tracing;
using System.Runtime.CompilerServices;
using System.Threading;

[EventSource(Name = "Ringpipe-DotnetApp")]
internal sealed class AppSource : EventSource
{
    public static readonly AppSource Log = new AppSource();

    [Event(1, Level = EventLevel.Informational)]
    public void Tick(long N) => WriteEvent(1, N);
}

internal static class Hot
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int SpinFibonacci(int n) => n < 2 ? n : SpinFibonacci(n - 1) + SpinFibonacci(n - 2);
}

internal static class Warm
{
    // a loop rather than recursion: a second, flat profile entry
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long SumSquares(long n)
    {
        long s = 0;
        for (long i = 0; i < n; i++)
            s += i * i ^ (s >> 3);
        return s;
    }
}

internal static class Program
{
    // read by nobody: keeps the JIT from dropping the spinning calls
    public static long Sink;

    private static void Spin()
    {
        // shares by the clock, not by amounts of work, which tiered
        // compilation would skew: 30 ms in one method, then 10 ms in the
        // other. Calls of a millisecond or so: a thread stopped for a
        // sample stops in the method, not at this loop's GC poll.
        var sw = Stopwatch.StartNew();
        long fibTicks = Stopwatch.Frequency * 3 / 100, squaresTicks = Stopwatch.Frequency / 100;
        for (;;)
        {
            long end = sw.ElapsedTicks + fibTicks;
            while (sw.ElapsedTicks < end)
                Sink += Hot.SpinFibonacci(27);
            end += squaresTicks;
            while (sw.ElapsedTicks < end)
                Sink += Warm.SumSquares(1000000);
        }
    }

    private static int Usage(string why)
    {
        Console.Error.WriteLine($"DotnetApp: {why}");
        Console.Error.WriteLine("usage: DotnetApp [--rate N] [--duration SECONDS] [--spin] [--exit-code N]");
        return 2;
    }

    private static int Main(string[] args)
    {
        int rate = 20;
        double duration = 10;
        bool spin = false;
        int exitCode = 0;

        for (int i = 0; i < args.Length; i++)
        {
            string a = args[i];
            if (a == "--spin")
            {
                spin = true;
                continue;
            }
            if (i + 1 >= args.Length)
                return Usage($"option '{a}' needs a value");
            string v = args[++i];
            if (a == "--rate")
            {
                if (!int.TryParse(v, out rate) || rate < 1 || rate > 100000)
                    return Usage($"--rate must be 1..100000, not '{v}'");
            }
            else if (a == "--duration")
            {
                if (!double.TryParse(v, System.Globalization.NumberStyles.Float,
                                     System.Globalization.CultureInfo.InvariantCulture, out duration) ||
                    duration < 0)
                    return Usage($"--duration must be a number of seconds >= 0, not '{v}'");
            }
            else if (a == "--exit-code")
            {
                if (!int.TryParse(v, out exitCode) || exitCode < 0 || exitCode > 125)
                    return Usage($"--exit-code must be 0..125, not '{v}'");
            }
            else
            {
                return Usage($"unknown option '{a}'");
            }
        }

        Console.WriteLine($"pid {Environment.ProcessId}");
        Console.Out.Flush();
        for (int k = 0; spin && k < 2; k++)
            new Thread(Spin) { IsBackground = true, Name = "spin" }.Start();

        var clock = Stopwatch.StartNew();
        long ticks = 0;
        long lastGc = 0;
        var garbage = new object[64];
        while (duration == 0 || clock.Elapsed.TotalSeconds < duration)
        {
            ticks++;
            AppSource.Log.Tick(ticks);
            garbage[ticks & 63] = new byte[1024];
            long second = clock.ElapsedMilliseconds / 1000;
            if (second != lastGc)
            {
                lastGc = second;
                GC.Collect();
            }
            // sleep until the next tick is due, so the rate holds on average
            double next = (double)ticks / rate * 1000.0;
            double wait = next - clock.Elapsed.TotalMilliseconds;
            if (wait > 0)
                Thread.Sleep(TimeSpan.FromMilliseconds(wait));
        }
        Console.WriteLine($"ticks {ticks}");
        Console.Out.Flush();
        return exitCode;
    }
}
