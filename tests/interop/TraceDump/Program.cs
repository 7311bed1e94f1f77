// TraceDump: prints TraceEvent's view of a nettrace file in the canonical dump
// format specified in ../README.md. The interop tests compare this output byte for
// byte with `ringpipe dump`; TraceEvent is the judge.
//
//   dotnet TraceDump.dll dump     FILE   one JSON object per event, then a summary line
//   dotnet TraceDump.dll counts   FILE   "<Provider>/<EventName>\t<count>" sorted ordinally, then "#lost\t<N>"
//   dotnet TraceDump.dll tracelog FILE   converts through TraceLog (.etlx) and counts the events
//   dotnet TraceDump.dll clr      FILE   CLR runtime/rundown and Ringpipe-Demo events, one line each:
//                                         "<EventName>\t<Field>=<value>..." (TraceEvent's payload names)
//   dotnet TraceDump.dll heap     FILE   the last heap dump (induced gen-2 GCStart .. GCEnd), decoded
//                                         element by element through TraceEvent's typed accessors
//
// Exit status: 0 = read to the end, 1 = TraceEvent threw, 2 = bad usage.

using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Diagnostics.Tracing;
using Microsoft.Diagnostics.Tracing.Etlx;
using Microsoft.Diagnostics.Tracing.EventPipe;
using Microsoft.Diagnostics.Tracing.Parsers;
using Microsoft.Diagnostics.Tracing.Parsers.Clr;

internal static class Program
{
    private static int Main(string[] args)
    {
        bool threads = args.Length == 3 && args[0] == "threads";
        if (!threads && (args.Length != 2 || (args[0] != "dump" && args[0] != "counts" && args[0] != "tracelog"
                                              && args[0] != "clr" && args[0] != "heap")))
        {
            Console.Error.WriteLine("usage: TraceDump dump|counts|tracelog|clr|heap FILE | threads FILE FIELD");
            return 2;
        }

        var stdout = new StreamWriter(Console.OpenStandardOutput(), new UTF8Encoding(false), 1 << 16);
        stdout.NewLine = "\n";
        try
        {
            switch (args[0])
            {
                case "dump": return Dump(args[1], stdout);
                case "counts": return Counts(args[1], stdout);
                case "threads": return Threads(args[1], args[2], stdout);
                case "clr": return Clr(args[1], stdout);
                case "heap": return Heap(args[1], stdout);
                default: return TraceLogCheck(args[1], stdout);
            }
        }
        finally
        {
            stdout.Flush();
        }
    }

    // ------------------------------------------------------------------ reading

    // Opens FILE and subscribes the parsers whose event names the dump must use:
    // the CLR runtime, rundown, private-runtime and sample-profiler parsers (their
    // templates name the runtime's events the way PerfView does) and the dynamic
    // parser, which takes the templates EventPipeEventSource builds from the file's
    // own metadata for every other event. An event no template matches is still
    // dispatched (as an UnhandledTraceEvent, named "EventID(N)" and the like).
    // Every event reaches `onEvent` exactly once, through AllEvents (checked: its
    // count equals the sum over the parsers' All callbacks); the parsers' own
    // callbacks are no-ops that only make the parsers register their templates.
    //
    // Returns null when the whole file was read, else the error message.
    private static string Read(string file, Action<TraceEvent> onEvent, out int lost)
    {
        lost = 0;
        EventPipeEventSource source = null;
        try
        {
            source = new EventPipeEventSource(file);
            Action<TraceEvent> ignore = _ => { };
            source.Clr.All += ignore;
            new ClrRundownTraceEventParser(source).All += ignore;
            new ClrPrivateTraceEventParser(source).All += ignore;
            new SampleProfilerTraceEventParser(source).All += ignore;
            source.Dynamic.All += ignore;
            source.AllEvents += onEvent;
            source.Process();
            lost = source.EventsLost;
            return null;
        }
        catch (Exception e)
        {
            try { if (source != null) lost = source.EventsLost; } catch { }
            return e.Message;
        }
        finally
        {
            try { source?.Dispose(); } catch { }
        }
    }

    // The last line of every counting mode, then the exit status: 0 when the
    // whole file was read, 1 (with TraceEvent's message on stderr) otherwise.
    private static int Finish(StreamWriter output, int lost, string error)
    {
        output.Write("#lost\t" + lost.ToString(CultureInfo.InvariantCulture) + "\n");
        if (error == null)
            return 0;
        output.Flush();
        Console.Error.WriteLine("TraceDump: " + error);
        return 1;
    }

    // ------------------------------------------------------------------ dump

    private static int Dump(string file, StreamWriter output)
    {
        var line = new StringBuilder(1024);
        long count = 0;
        string error = Read(file, evt =>
        {
            line.Clear();
            FormatEvent(line, evt);
            line.Append('\n');
            output.Write(line);
            count++;
        }, out int lost);

        line.Clear();
        line.Append("{\"summary\":true,\"events\":").Append(count.ToString(CultureInfo.InvariantCulture));
        line.Append(",\"lost\":").Append(lost.ToString(CultureInfo.InvariantCulture));
        line.Append(",\"error\":");
        if (error == null) line.Append("null"); else AppendString(line, error);
        line.Append("}\n");
        output.Write(line);
        return error == null ? 0 : 1;
    }

    private static void FormatEvent(StringBuilder sb, TraceEvent evt)
    {
        sb.Append("{\"provider\":");
        AppendString(sb, evt.ProviderName);
        sb.Append(",\"guid\":\"").Append(evt.ProviderGuid.ToString("D")).Append('"');
        sb.Append(",\"id\":").Append(((int)evt.ID).ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"name\":");
        AppendString(sb, evt.EventName);
        sb.Append(",\"version\":").Append(evt.Version.ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"opcode\":").Append(((int)evt.Opcode).ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"level\":").Append(((int)evt.Level).ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"keywords\":\"0x").Append(((ulong)evt.Keywords).ToString("x16", CultureInfo.InvariantCulture)).Append('"');
        sb.Append(",\"pid\":").Append(evt.ProcessID.ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"tid\":").Append(evt.ThreadID.ToString(CultureInfo.InvariantCulture));
        // TraceEvent.TimeStampQPC (public in TraceEvent 4.0.0) returns the
        // EVENT_RECORD's EventHeader.TimeStamp, which EventPipeEventSource fills with
        // the event's timestamp as decoded from the file, in the file's QPC ticks.
        sb.Append(",\"ts\":").Append(evt.TimeStampQPC.ToString(CultureInfo.InvariantCulture));
        sb.Append(",\"activity\":\"").Append(evt.ActivityID.ToString("D")).Append('"');
        sb.Append(",\"related\":\"").Append(evt.RelatedActivityID.ToString("D")).Append('"');
        sb.Append(",\"stack\":[");
        StackReader.Append(sb, evt);
        sb.Append("],\"fields\":{");
        string[] names = evt.PayloadNames;
        if (names != null)
        {
            for (int i = 0; i < names.Length; i++)
            {
                if (i > 0) sb.Append(',');
                AppendString(sb, names[i]);
                sb.Append(':');
                AppendValue(sb, evt.PayloadValue(i), evt.PointerSize);
            }
        }
        sb.Append("}}");
    }

    private static void AppendValue(StringBuilder sb, object value, int pointerSize)
    {
        var inv = CultureInfo.InvariantCulture;
        switch (value)
        {
            // TraceEvent returns null for a field the payload is too short to hold
            // (or, in the CLR parsers, a field this event version does not have).
            case null: sb.Append("null"); return;
            case bool b: sb.Append(b ? "true" : "false"); return;
            case Enum e:
                // Enums from the CLR parsers' templates: print the underlying integer.
                switch (Type.GetTypeCode(Enum.GetUnderlyingType(e.GetType())))
                {
                    case TypeCode.SByte: case TypeCode.Int16: case TypeCode.Int32: case TypeCode.Int64:
                        sb.Append(Convert.ToInt64(e, inv).ToString(inv)); return;
                    default:
                        sb.Append(Convert.ToUInt64(e, inv).ToString(inv)); return;
                }
            case sbyte v: sb.Append(v.ToString(inv)); return;
            case byte v: sb.Append(v.ToString(inv)); return;
            case short v: sb.Append(v.ToString(inv)); return;
            case ushort v: sb.Append(v.ToString(inv)); return;
            case int v: sb.Append(v.ToString(inv)); return;
            case uint v: sb.Append(v.ToString(inv)); return;
            case long v: sb.Append(v.ToString(inv)); return;
            case ulong v: sb.Append(v.ToString(inv)); return;
            case char c: sb.Append(((int)c).ToString(inv)); return;
            case float f: sb.Append("\"f32:0x").Append(BitConverter.SingleToUInt32Bits(f).ToString("x8", inv)).Append('"'); return;
            case double d: sb.Append("\"f64:0x").Append(BitConverter.DoubleToUInt64Bits(d).ToString("x16", inv)).Append('"'); return;
            case Guid g: sb.Append('"').Append(g.ToString("D")).Append('"'); return;
            case string s: AppendString(sb, s); return;
            case DateTime dt:
                // FILETIME (100 ns ticks since 1601-01-01 UTC). ToFileTimeUtc treats an
                // Unspecified kind as UTC; a Local one is converted back to UTC first.
                if (dt.Kind == DateTimeKind.Local) dt = dt.ToUniversalTime();
                sb.Append((dt.Ticks - 504911232000000000L).ToString(inv)); return;
            case IntPtr p:
                sb.Append(pointerSize == 4 ? ((ulong)(uint)(long)p).ToString(inv) : ((ulong)(long)p).ToString(inv)); return;
            case UIntPtr up: sb.Append(((ulong)up).ToString(inv)); return;
            case IDictionary<string, object> dict:
                // Nested struct (DynamicTraceEventData's StructValue): fields in
                // declaration order, which is the dictionary's enumeration order.
                {
                    sb.Append('{');
                    bool first = true;
                    foreach (var kv in dict)
                    {
                        if (!first) sb.Append(',');
                        first = false;
                        AppendString(sb, kv.Key);
                        sb.Append(':');
                        AppendValue(sb, kv.Value, pointerSize);
                    }
                    sb.Append('}');
                    return;
                }
            case Array arr:
                {
                    sb.Append('[');
                    for (int i = 0; i < arr.Length; i++)
                    {
                        if (i > 0) sb.Append(',');
                        AppendValue(sb, arr.GetValue(i), pointerSize);
                    }
                    sb.Append(']');
                    return;
                }
            default:
                sb.Append("\"?").Append(value.GetType().Name).Append('"');
                return;
        }
    }

    // JSON string: '"' and '\' escaped with a backslash, code units below 0x20 as
    // \u00hh (lower-case hex), an unpaired UTF-16 surrogate as U+FFFD (it has no
    // UTF-8 form), everything else as is (UTF-8 on output).
    private static void AppendString(StringBuilder sb, string s)
    {
        sb.Append('"');
        if (s != null)
        {
            for (int i = 0; i < s.Length; i++)
            {
                char c = s[i];
                if (c == '"' || c == '\\') sb.Append('\\').Append(c);
                else if (c < 0x20) sb.Append("\\u00").Append(((int)c).ToString("x2", CultureInfo.InvariantCulture));
                else if (char.IsHighSurrogate(c) && i + 1 < s.Length && char.IsLowSurrogate(s[i + 1])) sb.Append(c).Append(s[++i]);
                else if (char.IsSurrogate(c)) sb.Append('\uFFFD');
                else sb.Append(c);
            }
        }
        sb.Append('"');
    }

    // Reads the stack TraceEvent attached to the current event. EventPipeEventSource
    // puts an EventPipe event's stack into the EVENT_RECORD's extended data as an
    // EVENT_HEADER_EXT_TYPE_STACK_TRACE64 (or ..._STACK_TRACE32) item whose DataPtr
    // points at an 8-byte MatchId followed by the addresses, innermost frame first.
    // TraceEvent 4.0.0 has no public API for this, so the private field
    // TraceEvent.eventRecord (TraceEventNativeMethods.EVENT_RECORD*) is read with a
    // small IL accessor, and the struct offsets come from the (internal) native
    // struct types via Marshal.OffsetOf.
    private static unsafe class StackReader
    {
        private const int ExtTypeStackTrace32 = 5;  // EVENT_HEADER_EXT_TYPE_STACK_TRACE32
        private const int ExtTypeStackTrace64 = 6;  // EVENT_HEADER_EXT_TYPE_STACK_TRACE64

        private static readonly Func<TraceEvent, IntPtr> GetRecord;
        private static readonly int OffExtCount, OffExtData, ItemSize, OffItemType, OffItemSize, OffItemPtr;

        static StackReader()
        {
            Assembly asm = typeof(TraceEvent).Assembly;
            FieldInfo field = typeof(TraceEvent).GetField("eventRecord", BindingFlags.Instance | BindingFlags.NonPublic)
                ?? throw new MissingFieldException("TraceEvent.eventRecord");
            var dm = new DynamicMethod("GetEventRecord", typeof(IntPtr), new[] { typeof(TraceEvent) }, typeof(TraceEvent), true);
            ILGenerator il = dm.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            il.Emit(OpCodes.Ldfld, field);
            il.Emit(OpCodes.Conv_I);
            il.Emit(OpCodes.Ret);
            GetRecord = (Func<TraceEvent, IntPtr>)dm.CreateDelegate(typeof(Func<TraceEvent, IntPtr>));

            Type rec = asm.GetType("Microsoft.Diagnostics.Tracing.TraceEventNativeMethods+EVENT_RECORD", true);
            Type item = asm.GetType("Microsoft.Diagnostics.Tracing.TraceEventNativeMethods+EVENT_HEADER_EXTENDED_DATA_ITEM", true);
            OffExtCount = (int)Marshal.OffsetOf(rec, "ExtendedDataCount");
            OffExtData = (int)Marshal.OffsetOf(rec, "ExtendedData");
            ItemSize = Marshal.SizeOf(item);
            OffItemType = (int)Marshal.OffsetOf(item, "ExtType");
            OffItemSize = (int)Marshal.OffsetOf(item, "DataSize");
            OffItemPtr = (int)Marshal.OffsetOf(item, "DataPtr");
        }

        public static void Append(StringBuilder sb, TraceEvent evt)
        {
            byte* record = (byte*)GetRecord(evt);
            if (record == null) return;
            int count = *(ushort*)(record + OffExtCount);
            byte* items = *(byte**)(record + OffExtData);
            if (count == 0 || items == null) return;
            for (int i = 0; i < count; i++)
            {
                byte* it = items + i * ItemSize;
                int type = *(ushort*)(it + OffItemType);
                if (type != ExtTypeStackTrace64 && type != ExtTypeStackTrace32) continue;
                int size = *(ushort*)(it + OffItemSize);
                byte* data = (byte*)*(ulong*)(it + OffItemPtr);
                int width = type == ExtTypeStackTrace64 ? 8 : 4;
                int frames = (size - 8) / width;
                byte* addr = data + 8;  // skip MatchId
                for (int f = 0; f < frames; f++)
                {
                    ulong a = width == 8 ? *(ulong*)(addr + f * 8) : *(uint*)(addr + f * 4);
                    if (f > 0) sb.Append(',');
                    sb.Append("\"0x").Append(a.ToString("x", CultureInfo.InvariantCulture)).Append('"');
                }
                return;
            }
        }
    }

    // ------------------------------------------------------------------ counts

    private static int Counts(string file, StreamWriter output)
    {
        var counts = new Dictionary<string, long>(StringComparer.Ordinal);
        string error = Read(file, evt =>
        {
            string key = evt.ProviderName + "/" + evt.EventName;
            counts.TryGetValue(key, out long n);
            counts[key] = n + 1;
        }, out int lost);

        var keys = new List<string>(counts.Keys);
        keys.Sort(StringComparer.Ordinal);
        foreach (string key in keys)
        {
            output.Write(key);
            output.Write('\t');
            output.Write(counts[key].ToString(CultureInfo.InvariantCulture));
            output.Write('\n');
        }
        return Finish(output, lost, error);
    }

    // Per thread: how many events, and whether the numeric payload field FIELD
    // strictly increases in dispatch order (the writer's own counter, so this
    // checks that each thread's events arrive in the order it wrote them).
    // Prints "<pid>/<tid>\t<count>" sorted, then "#nofield", "#order_violations"
    // and "#lost" lines.
    private static int Threads(string file, string field, StreamWriter output)
    {
        var counts = new Dictionary<string, long>(StringComparer.Ordinal);
        var last = new Dictionary<string, ulong>(StringComparer.Ordinal);
        long violations = 0, nofield = 0;
        string error = Read(file, evt =>
        {
            int idx = Array.IndexOf(evt.PayloadNames ?? Array.Empty<string>(), field);
            if (idx < 0)
            {
                nofield++;
                return;
            }
            ulong v = Convert.ToUInt64(evt.PayloadValue(idx), CultureInfo.InvariantCulture);
            string key = evt.ProcessID.ToString(CultureInfo.InvariantCulture) + "/" +
                         evt.ThreadID.ToString(CultureInfo.InvariantCulture);
            counts.TryGetValue(key, out long n);
            counts[key] = n + 1;
            if (last.TryGetValue(key, out ulong prev) && v <= prev)
                violations++;
            last[key] = v;
        }, out int lost);

        var keys = new List<string>(counts.Keys);
        keys.Sort(StringComparer.Ordinal);
        foreach (string key in keys)
            output.Write(key + "\t" + counts[key].ToString(CultureInfo.InvariantCulture) + "\n");
        output.Write("#nofield\t" + nofield.ToString(CultureInfo.InvariantCulture) + "\n");
        output.Write("#order_violations\t" + violations.ToString(CultureInfo.InvariantCulture) + "\n");
        return Finish(output, lost, error);
    }

    // ------------------------------------------------------------------ clr

    // One line per event of the CLR runtime and rundown providers and of
    // Ringpipe-Demo's SessionEnd: the event name, then every payload field
    // TraceEvent's template knows, as Name=value (integers, enums and pointers
    // in decimal, strings as they are). Ends with "#lost\tN".
    private static int Clr(string file, StreamWriter output)
    {
        var sb = new StringBuilder(512);
        string error = Read(file, evt =>
        {
            string p = evt.ProviderName;
            if (p != "Microsoft-Windows-DotNETRuntime" && p != "Microsoft-Windows-DotNETRuntimeRundown"
                && !(p == "Ringpipe-Demo" && evt.EventName == "SessionEnd"))
                return;
            sb.Clear();
            sb.Append(evt.EventName);
            string[] names = evt.PayloadNames ?? Array.Empty<string>();
            for (int i = 0; i < names.Length; i++)
            {
                sb.Append('\t').Append(names[i]).Append('=');
                object v = evt.PayloadValue(i);
                if (v is string s) sb.Append(s);
                else AppendValue(sb, v, evt.PointerSize);
            }
            sb.Append('\n');
            output.Write(sb);
        }, out int lost);
        return Finish(output, lost, error);
    }

    // ------------------------------------------------------------------ heap

    // The same order-sensitive fold ringpipe-demo computes over what it writes
    // (tools/demo/clr_events.c, clr_digest_step).
    private static ulong Fold(ulong digest, ulong position, ulong value)
    {
        unchecked
        {
            digest ^= value + position * 0x9e3779b97f4a7c15UL;
            return digest * 0x100000001b3UL;
        }
    }

    private sealed class Stream
    {
        public ulong Digest = 0xcbf29ce484222325UL, Elements;
        public int NextIndex, IndexGaps;
        public void Reset() { Digest = 0xcbf29ce484222325UL; Elements = 0; NextIndex = 0; IndexGaps = 0; }
        public void Block(int index) { if (index != NextIndex) IndexGaps++; NextIndex = index + 1; }
    }

    // Decodes the bulk heap-dump events of the last complete dump window (an
    // induced, non-concurrent gen-2 GCStart up to the GCEnd with its Count)
    // through TraceEvent's typed accessors, and prints what ringpipe-demo's
    // --heap-report holds, computed from the decoded elements:
    //   gc C / nodes N / edges E / roots R / types T / type <count> <bytes> <name>...
    // then "digest nodes=.. edges=.. roots=.. types=.." (the fold over every
    // element), "index-gaps N" (blocks whose Index did not follow the previous
    // one), "edge-targets-unknown N" (edges to no node) and "#lost N".
    private static int Heap(string file, StreamWriter output)
    {
        var typeNames = new Dictionary<ulong, string>();
        var nodes = new List<(ulong addr, ulong size, ulong type)>();
        var edgeTargets = new List<ulong>();
        long roots = 0, edgeCountSum = 0;
        var sn = new Stream(); var se = new Stream(); var sr = new Stream(); var st = new Stream();
        bool inWindow = false; int windowCount = -1;
        string last = null;
        EventPipeEventSource source = null;
        string error = null;
        int lost = 0;
        try
        {
            source = new EventPipeEventSource(file);
            var clr = source.Clr;
            clr.GCStart += d =>
            {
                if (d.Depth >= 2 && (int)d.Reason == 1 && (int)d.Type == 0)
                {
                    inWindow = true; windowCount = d.Count;
                    nodes.Clear(); edgeTargets.Clear(); roots = 0; edgeCountSum = 0;
                    sn.Reset(); se.Reset(); sr.Reset(); st.Reset();
                }
            };
            clr.TypeBulkType += d =>
            {
                for (int i = 0; i < d.Count; i++)
                {
                    var v = d.Values(i);
                    typeNames[(ulong)v.TypeID] = v.TypeName;
                    if (!inWindow) continue;
                    ulong pos = st.Elements++;
                    st.Digest = Fold(st.Digest, pos, (ulong)v.TypeID);
                    st.Digest = Fold(st.Digest, pos, (ulong)v.ModuleID);
                    st.Digest = Fold(st.Digest, pos, (ulong)(uint)v.Flags);
                    st.Digest = Fold(st.Digest, pos, (ulong)v.CorElementType);
                    foreach (char c in v.TypeName) st.Digest = Fold(st.Digest, pos, (ulong)c);
                }
            };
            clr.GCBulkNode += d =>
            {
                if (!inWindow) return;
                sn.Block(d.Index);
                for (int i = 0; i < d.Count; i++)
                {
                    var v = d.Values(i);
                    ulong pos = sn.Elements++;
                    sn.Digest = Fold(sn.Digest, pos, (ulong)v.Address);
                    sn.Digest = Fold(sn.Digest, pos, (ulong)v.Size);
                    sn.Digest = Fold(sn.Digest, pos, (ulong)v.TypeID);
                    sn.Digest = Fold(sn.Digest, pos, (ulong)v.EdgeCount);
                    nodes.Add(((ulong)v.Address, (ulong)v.Size, (ulong)v.TypeID));
                    edgeCountSum += (long)v.EdgeCount;
                }
            };
            clr.GCBulkEdge += d =>
            {
                if (!inWindow) return;
                se.Block(d.Index);
                for (int i = 0; i < d.Count; i++)
                {
                    var v = d.Values(i);
                    se.Digest = Fold(se.Digest, se.Elements++, (ulong)v.Target);
                    edgeTargets.Add((ulong)v.Target);
                }
            };
            clr.GCBulkRootEdge += d =>
            {
                if (!inWindow) return;
                sr.Block(d.Index);
                for (int i = 0; i < d.Count; i++)
                {
                    var v = d.Values(i);
                    ulong pos = sr.Elements++;
                    sr.Digest = Fold(sr.Digest, pos, (ulong)v.RootedNodeAddress);
                    sr.Digest = Fold(sr.Digest, pos, (ulong)(int)v.GCRootKind);
                    sr.Digest = Fold(sr.Digest, pos, (ulong)(uint)v.GCRootFlag);
                    sr.Digest = Fold(sr.Digest, pos, (ulong)v.GCRootID);
                    roots++;
                }
            };
            clr.GCStop += d =>
            {
                if (!inWindow || d.Count != windowCount) return;
                inWindow = false;
                var perType = new Dictionary<ulong, (long n, ulong bytes)>();
                var addrs = new HashSet<ulong>();
                foreach (var nd in nodes)
                {
                    perType.TryGetValue(nd.type, out var c);
                    perType[nd.type] = (c.n + 1, c.bytes + nd.size);
                    addrs.Add(nd.addr);
                }
                long unknown = 0;
                foreach (ulong t in edgeTargets) if (!addrs.Contains(t)) unknown++;
                var lines = new List<string>();
                foreach (var kv in typeNames)
                {
                    perType.TryGetValue(kv.Key, out var c);
                    lines.Add(kv.Value + "\u0001" + c.n.ToString(CultureInfo.InvariantCulture) + " "
                              + c.bytes.ToString(CultureInfo.InvariantCulture));
                }
                lines.Sort(StringComparer.Ordinal);
                var sb = new StringBuilder();
                var inv = CultureInfo.InvariantCulture;
                sb.Append("gc ").Append(windowCount.ToString(inv)).Append('\n');
                sb.Append("nodes ").Append(nodes.Count.ToString(inv)).Append('\n');
                sb.Append("edges ").Append(edgeTargets.Count.ToString(inv)).Append('\n');
                sb.Append("roots ").Append(roots.ToString(inv)).Append('\n');
                sb.Append("types ").Append(typeNames.Count.ToString(inv)).Append('\n');
                foreach (string l in lines)
                {
                    int k = l.IndexOf('\u0001');
                    sb.Append("type ").Append(l.Substring(k + 1)).Append(' ').Append(l.Substring(0, k)).Append('\n');
                }
                sb.Append("digest nodes=").Append(sn.Digest.ToString(inv)).Append(" edges=").Append(se.Digest.ToString(inv))
                  .Append(" roots=").Append(sr.Digest.ToString(inv)).Append(" types=").Append(st.Digest.ToString(inv)).Append('\n');
                sb.Append("index-gaps ").Append((sn.IndexGaps + se.IndexGaps + sr.IndexGaps).ToString(inv)).Append('\n');
                sb.Append("edge-count-sum ").Append(edgeCountSum.ToString(inv)).Append('\n');
                sb.Append("edge-targets-unknown ").Append(unknown.ToString(inv)).Append('\n');
                last = sb.ToString();
            };
            source.Process();
            lost = source.EventsLost;
        }
        catch (Exception e)
        {
            error = e.Message;
        }
        finally
        {
            try { source?.Dispose(); } catch { }
        }
        output.Write(last ?? "no-heap-dump\n");
        return Finish(output, lost, error);
    }

    // ------------------------------------------------------------------ tracelog

    private static int TraceLogCheck(string file, StreamWriter output)
    {
        string etlx = Path.Combine(Path.GetTempPath(), "tracedump-" + Guid.NewGuid().ToString("N") + ".etlx");
        try
        {
            TraceLog.CreateFromEventPipeDataFile(file, etlx);
            long events = 0;
            int lost;
            using (var log = new TraceLog(etlx))
            {
                foreach (TraceEvent _ in log.Events) events++;
                lost = log.EventsLost;
            }
            output.Write("tracelog events=" + events.ToString(CultureInfo.InvariantCulture)
                + " lost=" + lost.ToString(CultureInfo.InvariantCulture) + "\n");
            return 0;
        }
        catch (Exception e)
        {
            output.Write("tracelog error: " + e.Message.Replace('\n', ' ') + "\n");
            return 1;
        }
        finally
        {
            try { File.Delete(etlx); } catch { }
        }
    }
}
