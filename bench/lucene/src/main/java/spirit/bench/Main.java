package spirit.bench;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.IntPredicate;
import java.util.stream.Stream;
import java.util.zip.GZIPInputStream;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.LowerCaseFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.util.CharTokenizer;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.SegmentInfos;
import org.apache.lucene.queryparser.classic.QueryParser;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.Directory;
import org.apache.lucene.store.MMapDirectory;
import org.apache.lucene.util.Version;

/**
 * lucene-baseline: the Lucene side of the spirit benchmark baselines. Same command-line contract and
 * JSON output as bench/tantivy (see bench/baselines/README.md).
 *
 * <pre>
 * lucene-baseline --docs FILE [--max-docs N] --tasks FILE [--categories C1,C2,...]
 *     [--queries-per-category N] --mode static|nrt [--reopen-every K] [--wrt-fraction F]
 *     [--top-k 10] [--index-dir DIR] --out result.json
 * </pre>
 */
public final class Main {

  static final String ENGINE = "lucene";
  static final double RAM_BUFFER_MB = 256;

  // ------------------------------------------------------------------ arguments

  static final class Args {
    Path docs;
    long maxDocs = -1;
    Path tasks;
    List<String> categories;
    int queriesPerCategory = 100;
    String mode;
    int reopenEvery = 1;
    double wrtFraction = 0.8;
    double ingestRate = 0; // nrt: docs/s, 0 = as fast as possible
    int topK = 10;
    int warmupPasses = 2; // JVM: the whole query set twice
    double warmupSeconds = 10; // ...and at least this long (JIT warm-up)
    Path indexDir;
    Path out;
    int threads = 1; // bulk: indexing threads
  }

  static final String USAGE =
      "usage: lucene-baseline --docs FILE [--max-docs N] --tasks FILE [--categories C1,C2,...]\n"
          + "       [--queries-per-category N (100)] --mode static|nrt [--reopen-every K (1)]\n"
          + "       [--wrt-fraction F (0.8)] [--top-k K (10)] [--index-dir DIR] --out result.json\n"
          + "       [--warmup-passes N (2)] [--warmup-seconds S (10)] [--ingest-rate DOCS_PER_SEC (0)]\n"
          + "       lucene-baseline --docs FILE [--max-docs N] --mode bulk [--threads N (1)] --out result.json";

  static Args parseArgs(String[] argv) {
    Args a = new Args();
    for (int i = 0; i < argv.length; i++) {
      String key = argv[i];
      String val;
      int eq = key.indexOf('=');
      if (key.startsWith("--") && eq > 0) {
        val = key.substring(eq + 1);
        key = key.substring(0, eq);
      } else if (key.equals("-h") || key.equals("--help")) {
        System.err.println(USAGE);
        System.exit(0);
        return a;
      } else {
        if (i + 1 >= argv.length) throw new IllegalArgumentException("missing value for " + key);
        val = argv[++i];
      }
      switch (key) {
        case "--docs" -> a.docs = Paths.get(val);
        case "--max-docs" -> a.maxDocs = Long.parseLong(val);
        case "--tasks" -> a.tasks = Paths.get(val);
        case "--categories" -> {
          a.categories = new ArrayList<>();
          for (String c : val.split(",")) if (!c.isBlank()) a.categories.add(c.trim());
        }
        case "--queries-per-category" -> a.queriesPerCategory = Integer.parseInt(val);
        case "--mode" -> a.mode = val;
        case "--reopen-every" -> a.reopenEvery = Integer.parseInt(val);
        case "--wrt-fraction" -> a.wrtFraction = Double.parseDouble(val);
        case "--ingest-rate" -> a.ingestRate = Double.parseDouble(val);
        case "--top-k" -> a.topK = Integer.parseInt(val);
        case "--warmup-passes" -> a.warmupPasses = Integer.parseInt(val);
        case "--warmup-seconds" -> a.warmupSeconds = Double.parseDouble(val);
        case "--index-dir" -> a.indexDir = Paths.get(val);
        case "--out" -> a.out = Paths.get(val);
        case "--threads" -> a.threads = Integer.parseInt(val);
        default -> throw new IllegalArgumentException("unknown option " + key);
      }
    }
    if (a.docs == null || a.mode == null || a.out == null)
      throw new IllegalArgumentException("--docs, --mode and --out are required");
    if (!a.mode.equals("static") && !a.mode.equals("nrt") && !a.mode.equals("bulk"))
      throw new IllegalArgumentException("--mode must be static, nrt or bulk");
    if (a.tasks == null && !a.mode.equals("bulk"))
      throw new IllegalArgumentException("--tasks is required");
    if (a.threads < 1) throw new IllegalArgumentException("--threads must be >= 1");
    if (!(a.ingestRate >= 0)) throw new IllegalArgumentException("--ingest-rate must be >= 0");
    if (a.warmupPasses < 0 || a.warmupSeconds < 0)
      throw new IllegalArgumentException("--warmup-passes/--warmup-seconds must be >= 0");
    if (a.topK <= 0) throw new IllegalArgumentException("--top-k must be > 0");
    if (a.reopenEvery < 0) throw new IllegalArgumentException("--reopen-every must be >= 0");
    if (!(a.wrtFraction >= 0 && a.wrtFraction < 1))
      throw new IllegalArgumentException("--wrt-fraction must be in [0, 1)");
    return a;
  }

  // ------------------------------------------------------------------ input

  record Doc(String title, String date, String body) {}

  record Category(String name, List<String> queries) {}

  /** Reads a luceneutil line file; lines end at '\n' only (as in the Rust baseline). */
  static List<Doc> loadDocs(Path path, long maxDocs) throws IOException {
    List<Doc> docs = new ArrayList<>();
    InputStream raw = Files.newInputStream(path);
    InputStream in =
        path.toString().endsWith(".gz")
            ? new GZIPInputStream(raw, 1 << 16)
            : new BufferedInputStream(raw, 1 << 16);
    try (in) {
      byte[] buf = new byte[1 << 20];
      ByteArrayOutputStream line = new ByteArrayOutputStream(4096);
      boolean first = true;
      int n;
      outer:
      while ((n = in.read(buf)) > 0) {
        int start = 0;
        for (int i = 0; i < n; i++) {
          if (buf[i] == '\n') {
            line.write(buf, start, i - start);
            start = i + 1;
            if (maxDocs >= 0 && docs.size() >= maxDocs) break outer;
            String s = line.toString(StandardCharsets.UTF_8);
            line.reset();
            if (first) {
              first = false;
              if (s.startsWith("FIELDS_HEADER_INDICATOR")) continue;
            }
            docs.add(parseLine(s));
          }
        }
        line.write(buf, start, n - start);
      }
      if (line.size() > 0 && !(maxDocs >= 0 && docs.size() >= maxDocs)) {
        String s = line.toString(StandardCharsets.UTF_8);
        if (!(first && s.startsWith("FIELDS_HEADER_INDICATOR"))) docs.add(parseLine(s));
      }
    }
    return docs;
  }

  static Doc parseLine(String s) {
    String[] p = s.split("\t", 3);
    return new Doc(p[0], p.length > 1 ? p[1] : "", p.length > 2 ? p[2] : "");
  }

  static List<Category> loadTasks(Path path, List<String> wanted, int perCategory)
      throws IOException {
    Map<String, LinkedHashSet<String>> cats = new LinkedHashMap<>();
    for (String line : Files.readAllLines(path, StandardCharsets.UTF_8)) {
      line = line.strip();
      if (line.isEmpty() || line.startsWith("#")) continue;
      int colon = line.indexOf(':');
      if (colon < 0) continue;
      String cat = line.substring(0, colon).strip();
      String rest = line.substring(colon + 1);
      int hash = rest.indexOf('#');
      String q = (hash >= 0 ? rest.substring(0, hash) : rest).strip();
      if (q.isEmpty()) continue;
      LinkedHashSet<String> qs = cats.computeIfAbsent(cat, k -> new LinkedHashSet<>());
      if (qs.size() < perCategory) qs.add(q);
    }
    List<Category> out = new ArrayList<>();
    if (wanted == null) {
      cats.forEach((k, v) -> out.add(new Category(k, new ArrayList<>(v))));
    } else {
      for (String w : wanted) {
        LinkedHashSet<String> qs = cats.get(w);
        if (qs == null) throw new IllegalArgumentException("category " + w + " not found in the task file");
        out.add(new Category(w, new ArrayList<>(qs)));
      }
    }
    return out;
  }

  /** Queries interleaved round-robin over the categories: {category, query index}. */
  static int[][] roundRobin(List<Category> cats) {
    int longest = cats.stream().mapToInt(c -> c.queries().size()).max().orElse(0);
    List<int[]> order = new ArrayList<>();
    for (int i = 0; i < longest; i++)
      for (int c = 0; c < cats.size(); c++)
        if (i < cats.get(c).queries().size()) order.add(new int[] {c, i});
    return order.toArray(new int[0][]);
  }

  // ------------------------------------------------------------------ analysis

  /**
   * Token characters. Default "alnum" = exactly Rust's char::is_alphanumeric (what tantivy's
   * SimpleTokenizer uses): Unicode Alphabetic, or general category Nd/Nl/No. The alternative
   * "letterOrDigit" (-Dbaseline.tokenChars=letterOrDigit) is Character::isLetterOrDigit (L* or Nd),
   * which differs from tantivy on e.g. superscript digits and combining vowel signs.
   */
  static boolean isRustAlphanumeric(int cp) {
    if (cp < 0x80) {
      return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
    }
    if (Character.isAlphabetic(cp)) return true;
    int t = Character.getType(cp);
    return t == Character.DECIMAL_DIGIT_NUMBER
        || t == Character.LETTER_NUMBER
        || t == Character.OTHER_NUMBER;
  }

  static Analyzer analyzer(String tokenChars) {
    final IntPredicate pred =
        switch (tokenChars) {
          case "alnum" -> Main::isRustAlphanumeric;
          case "letterOrDigit" -> Character::isLetterOrDigit;
          default -> throw new IllegalArgumentException("baseline.tokenChars: alnum|letterOrDigit");
        };
    return new Analyzer() {
      @Override
      protected TokenStreamComponents createComponents(String fieldName) {
        // max token length 255 (CharTokenizer.DEFAULT_MAX_WORD_LEN)
        Tokenizer tok = CharTokenizer.fromTokenCharPredicate(pred);
        return new TokenStreamComponents(tok, new LowerCaseFilter(tok));
      }

      @Override
      protected TokenStream normalize(String fieldName, TokenStream in) {
        return new LowerCaseFilter(in);
      }
    };
  }

  // ------------------------------------------------------------------ indexing

  /** One reusable document per feeding thread (luceneutil style). */
  static final class DocMaker {
    final Document doc = new Document();
    final Field title = new Field("title", "", TextField.TYPE_STORED);
    final StoredField date = new StoredField("date", "");
    final Field body = new Field("body", "", TextField.TYPE_NOT_STORED);
    final StoredField id = new StoredField("id", 0);

    DocMaker() {
      doc.add(title);
      doc.add(date);
      doc.add(body);
      doc.add(id);
    }

    Document make(int docId, Doc d) {
      title.setStringValue(d.title());
      date.setStringValue(d.date());
      body.setStringValue(d.body());
      id.setIntValue(docId);
      return doc;
    }
  }

  static IndexWriter openWriter(Directory dir, Analyzer analyzer) throws IOException {
    IndexWriterConfig iwc = new IndexWriterConfig(analyzer);
    iwc.setOpenMode(IndexWriterConfig.OpenMode.CREATE);
    iwc.setRAMBufferSizeMB(RAM_BUFFER_MB);
    iwc.setSimilarity(new BM25Similarity()); // k1=1.2, b=0.75
    // Merge-on-refresh OFF by default (as Elasticsearch/OpenSearch configure Lucene): with Lucene's
    // default (500 ms) every NRT reopen/commit merges all tiny segments flushed since the last one and
    // waits up to 500 ms for it, which makes frequent reopens cost O(docs since last merge).
    // -Dbaseline.maxFullFlushMergeWaitMillis=500 restores Lucene's default.
    iwc.setMaxFullFlushMergeWaitMillis(maxFullFlushMergeWaitMillis());
    if (Boolean.getBoolean("baseline.infoStream")) iwc.setInfoStream(System.err); // debugging
    return new IndexWriter(dir, iwc);
  }

  static long maxFullFlushMergeWaitMillis() {
    return Long.parseLong(System.getProperty("baseline.maxFullFlushMergeWaitMillis", "0"));
  }

  static IndexSearcher newSearcher(DirectoryReader reader) {
    IndexSearcher s = new IndexSearcher(reader); // no executor: single-threaded search
    s.setSimilarity(new BM25Similarity());
    s.setQueryCache(null); // tantivy has no query cache
    return s;
  }

  static long dirSize(Path p) throws IOException {
    try (Stream<Path> s = Files.walk(p)) {
      return s.filter(Files::isRegularFile)
          .filter(f -> !f.getFileName().toString().equals("write.lock"))
          .mapToLong(
              f -> {
                try {
                  return Files.size(f);
                } catch (IOException e) {
                  return 0; // deleted meanwhile
                }
              })
          .sum();
    }
  }

  static void deleteTree(Path p) throws IOException {
    if (!Files.exists(p)) return;
    try (Stream<Path> s = Files.walk(p)) {
      for (Path f : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(f);
    }
  }

  static boolean looksLikeLuceneIndex(Path dir) throws IOException {
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "segments*")) {
      return ds.iterator().hasNext();
    }
  }

  static boolean isEmptyDir(Path dir) throws IOException {
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
      return !ds.iterator().hasNext();
    }
  }

  static long peakRssBytes() {
    try {
      for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
        if (line.startsWith("VmHWM:")) {
          String v = line.substring(6).replace("kB", "").strip();
          return Long.parseLong(v) * 1024;
        }
      }
    } catch (IOException | NumberFormatException e) {
      // not Linux
    }
    return 0;
  }

  static double micros(long ns) {
    return ns / 1000.0;
  }

  static double secs(long ns) {
    return ns / 1e9;
  }

  // ------------------------------------------------------------------ main

  public static void main(String[] argv) throws Exception {
    try {
      run(argv);
    } catch (IllegalArgumentException | java.io.FileNotFoundException | java.nio.file.NoSuchFileException e) {
      System.err.println("lucene-baseline: error: " + e);
      System.exit(1);
    }
  }

  static void run(String[] argv) throws Exception {
    Args args;
    try {
      args = parseArgs(argv);
    } catch (IllegalArgumentException e) {
      System.err.println("lucene-baseline: " + e.getMessage());
      System.err.println(USAGE);
      System.exit(2);
      return;
    }
    String tokenChars = System.getProperty("baseline.tokenChars", "alnum");
    if (args.mode.equals("bulk")) {
      runBulk(args, analyzer(tokenChars));
      return;
    }
    List<Category> cats = loadTasks(args.tasks, args.categories, args.queriesPerCategory);
    if (cats.stream().allMatch(c -> c.queries().isEmpty()))
      throw new IllegalArgumentException("no queries selected");

    long tl = System.nanoTime();
    List<Doc> docs = loadDocs(args.docs, args.maxDocs);
    System.err.printf(
        "[lucene] loaded %d docs in %.1fs, %d categories%n",
        docs.size(), secs(System.nanoTime() - tl), cats.size());

    Path dirPath;
    boolean removeDir;
    if (args.indexDir != null) {
      dirPath = args.indexDir;
      if (Files.exists(dirPath) && !isEmptyDir(dirPath)) {
        if (looksLikeLuceneIndex(dirPath)) deleteTree(dirPath);
        else
          throw new IllegalArgumentException(
              "--index-dir " + dirPath + " is not empty and holds no Lucene index; refusing to wipe it");
      }
      Files.createDirectories(dirPath);
      removeDir = false;
    } else {
      dirPath = Files.createTempDirectory("lucene-baseline-");
      removeDir = true;
    }

    Analyzer analyzer = analyzer(tokenChars);
    QueryParser qp = new QueryParser("body", analyzer); // default operator OR
    Query[][] parsed = new Query[cats.size()][];
    for (int c = 0; c < cats.size(); c++) {
      List<String> qs = cats.get(c).queries();
      parsed[c] = new Query[qs.size()];
      for (int i = 0; i < qs.size(); i++) parsed[c][i] = qp.parse(qs.get(i));
    }
    int[][] order = roundRobin(cats);

    Map<String, Object> out = new LinkedHashMap<>();
    out.put("engine", ENGINE);
    out.put("version", Version.LATEST.toString());
    out.put("runtime", "java " + Runtime.version() + " (" + System.getProperty("java.vm.name") + ")");
    out.put("mode", args.mode);
    out.put("reopen_every", args.mode.equals("nrt") ? args.reopenEvery : 0);
    out.put("docs", docs.size());
    out.put("top_k", args.topK);
    out.put("token_chars", tokenChars);
    out.put("max_full_flush_merge_wait_ms", maxFullFlushMergeWaitMillis());
    Map<String, Object> catJson = new LinkedHashMap<>();

    try (Directory dir = new MMapDirectory(dirPath)) {
      if (args.mode.equals("static")) {
        runStatic(args, dir, dirPath, analyzer, docs, cats, parsed, order, out, catJson);
      } else {
        runNrt(args, dir, dirPath, analyzer, docs, cats, parsed, order, out, catJson);
      }
    }
    out.put("peak_rss_bytes", peakRssBytes());
    out.put("categories", catJson);

    try (Writer w = Files.newBufferedWriter(args.out, StandardCharsets.UTF_8)) {
      StringBuilder sb = new StringBuilder();
      Json.write(sb, out, 0);
      sb.append('\n');
      w.write(sb.toString());
    }
    summary(out);
    if (removeDir) deleteTree(dirPath);
  }

  /**
   * Bulk indexing with all cores, timed end to end: one thread reads and decompresses the file into
   * batches of lines, `threads` threads parse them and call addDocument (Lucene indexes each thread's
   * documents into its own in-memory segment), then commit and close (which waits for merges).
   */
  static void runBulk(Args args, Analyzer analyzer) throws Exception {
    Path dirPath = Files.createTempDirectory("lucene-bulk-");
    final int batchLines = 512;
    java.util.concurrent.BlockingQueue<List<String>> queue =
        new java.util.concurrent.ArrayBlockingQueue<>(args.threads * 4);
    final List<String> end = new ArrayList<>();
    java.util.concurrent.atomic.AtomicInteger ids = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.atomic.AtomicReference<Throwable> failure =
        new java.util.concurrent.atomic.AtomicReference<>();
    long bytes = 0;
    long docs = 0;
    long t0 = System.nanoTime();
    try (Directory dir = new MMapDirectory(dirPath)) {
      IndexWriter w = openWriter(dir, analyzer);
      Thread[] workers = new Thread[args.threads];
      for (int t = 0; t < workers.length; t++) {
        workers[t] =
            new Thread(
                () -> {
                  DocMaker dm = new DocMaker();
                  try {
                    for (List<String> batch = queue.take(); batch != end; batch = queue.take()) {
                      for (String s : batch) w.addDocument(dm.make(ids.getAndIncrement(), parseLine(s)));
                    }
                  } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                  }
                });
        workers[t].start();
      }
      InputStream raw = Files.newInputStream(args.docs);
      InputStream plain =
          args.docs.toString().endsWith(".gz")
              ? new GZIPInputStream(raw, 1 << 16)
              : new BufferedInputStream(raw, 1 << 16);
      // Counts the decompressed bytes read (exact when the whole file is read; with --max-docs it
      // includes the reader's read-ahead).
      long[] read = new long[1];
      InputStream in =
          new java.io.FilterInputStream(plain) {
            @Override
            public int read(byte[] b, int off, int len) throws IOException {
              int n = super.read(b, off, len);
              if (n > 0) read[0] += n;
              return n;
            }
          };
      try (java.io.BufferedReader r =
          new java.io.BufferedReader(new java.io.InputStreamReader(in, StandardCharsets.UTF_8), 1 << 20)) {
        List<String> batch = new ArrayList<>(batchLines);
        boolean first = true;
        for (String line = r.readLine(); line != null; line = r.readLine()) {
          if (first) {
            first = false;
            if (line.startsWith("FIELDS_HEADER_INDICATOR")) continue;
          }
          if (args.maxDocs >= 0 && docs >= args.maxDocs) break;
          batch.add(line);
          docs++;
          if (batch.size() == batchLines) {
            queue.put(batch);
            batch = new ArrayList<>(batchLines);
          }
        }
        if (!batch.isEmpty()) queue.put(batch);
      }
      bytes = read[0];
      for (int t = 0; t < workers.length; t++) queue.put(end);
      for (Thread t : workers) t.join();
      if (failure.get() != null) throw new RuntimeException(failure.get());
      w.commit();
      w.close(); // waits for running merges
      double seconds = secs(System.nanoTime() - t0);
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("engine", ENGINE);
      out.put("version", Version.LATEST.toString());
      out.put("runtime", "java " + Runtime.version() + " (" + System.getProperty("java.vm.name") + ")");
      out.put("mode", "bulk");
      out.put("threads", args.threads);
      out.put("docs", docs);
      out.put("bytes", bytes);
      out.put("seconds", seconds);
      out.put("docs_per_sec", docs / seconds);
      out.put("mb_per_sec", bytes / 1e6 / seconds);
      out.put("segments", SegmentInfos.readLatestCommit(dir).size());
      out.put("index_bytes", dirSize(dirPath));
      out.put("peak_rss_bytes", peakRssBytes());
      try (Writer wr = Files.newBufferedWriter(args.out, StandardCharsets.UTF_8)) {
        StringBuilder sb = new StringBuilder();
        Json.write(sb, out, 0);
        sb.append('\n');
        wr.write(sb.toString());
      }
      System.err.printf(
          "[lucene] bulk, %d threads: %d docs (%.1f MB) in %.2f s = %.1f MB/s, %.0f docs/s%n",
          args.threads, docs, bytes / 1e6, seconds, bytes / 1e6 / seconds, docs / seconds);
    } finally {
      deleteTree(dirPath);
    }
  }

  static void runStatic(
      Args args,
      Directory dir,
      Path dirPath,
      Analyzer analyzer,
      List<Doc> docs,
      List<Category> cats,
      Query[][] parsed,
      int[][] order,
      Map<String, Object> out,
      Map<String, Object> catJson)
      throws Exception {
    int n = docs.size();
    IndexWriter w = openWriter(dir, analyzer);
    DocMaker dm = new DocMaker();
    long t0 = System.nanoTime();
    for (int i = 0; i < n; i++) w.addDocument(dm.make(i, docs.get(i)));
    w.commit();
    double indexSecs = secs(System.nanoTime() - t0);
    int segmentsBefore = SegmentInfos.readLatestCommit(dir).size();

    long tm = System.nanoTime();
    w.forceMerge(1, true);
    w.commit();
    w.close();
    double mergeSecs = secs(System.nanoTime() - tm);
    int segmentsAfter = SegmentInfos.readLatestCommit(dir).size();
    long indexBytes = dirSize(dirPath);

    out.put("ingest", ingestJson(n, indexSecs));
    out.put("merge_seconds", mergeSecs);
    out.put("segments_before_merge", segmentsBefore);
    out.put("segments", segmentsAfter);
    out.put("index_bytes", indexBytes);

    final int[] first = order[0]; // re-run after the restart below
    long firstCount = -1;
    try (DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher s = newSearcher(reader);
      // JVM warm-up: the whole query set twice (--warmup-passes), untimed
      long sink = warmUp(s, parsed, order, args, out);

      List<List<Double>> lat = new ArrayList<>();
      TopDocs[][] tops = new TopDocs[cats.size()][];
      for (int c = 0; c < cats.size(); c++) {
        lat.add(new ArrayList<>());
        tops[c] = new TopDocs[parsed[c].length];
      }
      for (int[] ci : order) {
        Query q = parsed[ci[0]][ci[1]];
        long t = System.nanoTime();
        TopDocs td = s.search(q, args.topK);
        long ns = System.nanoTime() - t;
        lat.get(ci[0]).add(micros(ns));
        tops[ci[0]][ci[1]] = td;
      }
      // untimed: hit counts and the ids of the top hits
      for (int c = 0; c < cats.size(); c++) {
        List<Long> counts = new ArrayList<>();
        List<List<Integer>> ids = new ArrayList<>();
        List<List<Double>> scores = new ArrayList<>();
        for (int i = 0; i < parsed[c].length; i++) {
          long count = s.count(parsed[c][i]);
          if (c == first[0] && i == first[1]) firstCount = count;
          counts.add(count);
          List<Integer> qi = new ArrayList<>();
          List<Double> qs = new ArrayList<>();
          for (ScoreDoc sd : tops[c][i].scoreDocs) {
            qi.add(s.storedFields().document(sd.doc).getField("id").numericValue().intValue());
            qs.add(Math.round(sd.score * 1e4) / 1e4);
          }
          ids.add(qi);
          scores.add(qs);
        }
        Map<String, Object> cj = new LinkedHashMap<>();
        cj.put("latencies_us", lat.get(c));
        cj.put("hit_counts", counts);
        cj.put("queries", cats.get(c).queries());
        cj.put("top_ids", ids);
        cj.put("top_scores", scores);
        catJson.put(cats.get(c).name(), cj);
      }
      if (sink == 42) System.err.print("");
    }

    // Restart (= recovery after a crash: the last commit): with the writer and reader closed, time
    // opening the index from its directory until a searcher is ready; then, untimed, check that the
    // first query counts as many hits as before.
    long to = System.nanoTime();
    try (Directory dir2 = new MMapDirectory(dirPath);
        DirectoryReader reader = DirectoryReader.open(dir2)) {
      IndexSearcher s = newSearcher(reader);
      double openSecs = secs(System.nanoTime() - to);
      long again = s.count(parsed[first[0]][first[1]]);
      if (again != firstCount)
        System.err.printf(
            "[lucene] after reopen `%s` counts %d hits, before %d%n",
            cats.get(first[0]).queries().get(first[1]), again, firstCount);
      out.put("open_seconds", openSecs);
    }
  }

  static void runNrt(
      Args args,
      Directory dir,
      Path dirPath,
      Analyzer analyzer,
      List<Doc> docs,
      List<Category> cats,
      Query[][] parsed,
      int[][] order,
      Map<String, Object> out,
      Map<String, Object> catJson)
      throws Exception {
    final int n = docs.size();
    final int nInit = (int) Math.floor(n * args.wrtFraction);
    final int nRest = n - nInit;
    if (nRest == 0)
      throw new IllegalArgumentException(
          "nrt mode needs documents left to ingest after the initial fraction");

    // initial load (committed)
    final IndexWriter w = openWriter(dir, analyzer);
    DocMaker dm = new DocMaker();
    long t0 = System.nanoTime();
    for (int i = 0; i < nInit; i++) w.addDocument(dm.make(i, docs.get(i)));
    w.commit();
    double initSecs = secs(System.nanoTime() - t0);
    System.err.printf("[lucene] initial load: %d docs in %.2fs%n", nInit, initSecs);

    DirectoryReader reader = DirectoryReader.open(w); // NRT reader on the writer
    IndexSearcher s = newSearcher(reader);
    // JVM warm-up on the initial snapshot: the whole query set twice (--warmup-passes), untimed
    long sink = warmUp(s, parsed, order, args, out);

    final AtomicBoolean done = new AtomicBoolean(false);
    final Throwable[] failure = new Throwable[1];
    final double[] addLoopSecs = new double[1];
    final double[] finalCommitSecs = new double[1];
    final long[] ingestEndNs = new long[1];
    final List<Doc> rest = docs.subList(nInit, n);
    final double rate = args.ingestRate;
    // ingest-to-visible: acked[j] = 1 + ns from ingestStart to addDocument of background doc j
    // returning (0 = not returned yet)
    final AtomicLongArray acked = new AtomicLongArray(nRest);
    final long ingestStart = System.nanoTime();
    Thread ingest =
        new Thread(
            () -> {
              long t = System.nanoTime();
              try {
                DocMaker m = new DocMaker();
                for (int j = 0; j < rest.size(); j++) {
                  if (rate > 0) {
                    long due = t + (long) (j / rate * 1e9);
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                  }
                  w.addDocument(m.make(nInit + j, rest.get(j)));
                  acked.setRelease(j, System.nanoTime() - ingestStart + 1);
                }
                addLoopSecs[0] = secs(System.nanoTime() - t);
                // the ingest ends with a commit of everything it added (as in the tantivy baseline)
                long tc = System.nanoTime();
                w.commit();
                finalCommitSecs[0] = secs(System.nanoTime() - tc);
              } catch (Throwable e) {
                failure[0] = e;
              } finally {
                ingestEndNs[0] = System.nanoTime();
                done.set(true);
              }
            },
            "ingest");
    ingest.start();

    int k = args.reopenEvery;
    List<List<Double>> lat = new ArrayList<>();
    for (int c = 0; c < cats.size(); c++) lat.add(new ArrayList<>());
    long qn = 0, reopens = 0;
    double reopenUsTotal = 0, reopenUsMax = 0;
    List<Double> reopenUs = new ArrayList<>();
    // One thread adds the docs in order and nothing is deleted, so a reader sees a prefix of the
    // background docs: the first visibleBg of them. visibleNs[j] = ingest-to-visible latency of doc j.
    int visibleBg = 0;
    final long[] visibleNs = new long[nRest];
    while (!done.get()) {
      int[] ci = order[(int) (qn % order.length)];
      long t = System.nanoTime();
      long bookkeepingNs = 0;
      if (k > 0 && qn % k == 0) {
        long tr = System.nanoTime();
        DirectoryReader nr = DirectoryReader.openIfChanged(reader, w);
        if (nr != null) {
          reader.close();
          reader = nr;
          s = newSearcher(reader);
        }
        long tDone = System.nanoTime();
        // ingest-to-visible (excluded from the reopen and query latencies): this reopen made docs
        // [visibleBg, nowVisible) visible at tDone. A doc can be flushed into the reader before its
        // addDocument returns (ack not stored yet, or later than tDone): latency 0.
        int nowVisible = Math.min(nRest, Math.max(0, reader.numDocs() - nInit));
        long doneAt = tDone - ingestStart;
        for (; visibleBg < nowVisible; visibleBg++) {
          long a = acked.getAcquire(visibleBg);
          visibleNs[visibleBg] = (a == 0 || a - 1 > doneAt) ? 0 : doneAt - (a - 1);
        }
        bookkeepingNs = System.nanoTime() - tDone;
        double r = micros(tDone - tr);
        reopens++;
        reopenUsTotal += r;
        reopenUsMax = Math.max(reopenUsMax, r);
        reopenUs.add(r);
      }
      TopDocs td = s.search(parsed[ci[0]][ci[1]], args.topK);
      long ns = System.nanoTime() - t - bookkeepingNs;
      sink += td.scoreDocs.length;
      lat.get(ci[0]).add(micros(ns));
      qn++;
    }
    int visibleAtEnd = reader.numDocs();
    ingest.join();
    double ingestSecs = secs(ingestEndNs[0] - ingestStart);
    if (failure[0] != null) throw new RuntimeException("ingest thread failed", failure[0]);
    DirectoryReader nr = DirectoryReader.openIfChanged(reader, w);
    if (nr != null) {
      reader.close();
      reader = nr;
    }
    int visibleFinal = reader.numDocs();
    reader.close();
    w.close(); // waits for running merges
    int segmentsFinal = SegmentInfos.readLatestCommit(dir).size();
    long indexBytes = dirSize(dirPath);

    out.put("ingest", ingestJson(nRest, ingestSecs));
    out.put("index_bytes", indexBytes);
    Map<String, Object> nrt = new LinkedHashMap<>();
    nrt.put("wrt_fraction", args.wrtFraction);
    nrt.put("ingest_rate", args.ingestRate);
    nrt.put("initial_docs", nInit);
    nrt.put("initial_seconds", initSecs);
    nrt.put("add_loop_seconds", addLoopSecs[0]);
    nrt.put("final_commit_seconds", finalCommitSecs[0]);
    nrt.put("queries_run", qn);
    nrt.put("reopens", reopens);
    nrt.put("reopen_us_total", reopenUsTotal);
    nrt.put("reopen_us_mean", reopens > 0 ? reopenUsTotal / reopens : 0.0);
    nrt.put("reopen_us_max", reopenUsMax);
    nrt.put("visible_docs_at_last_query", visibleAtEnd);
    nrt.put("visible_docs_final", visibleFinal);
    nrt.put("segments_final", segmentsFinal);
    // not counting the reload after the loop: background docs no reopen during the run made visible
    nrt.put("visibility", visibilityJson(visibleNs, visibleBg, nRest - visibleBg));
    nrt.put("reopen_us", reopenUs);
    out.put("nrt", nrt);
    for (int c = 0; c < cats.size(); c++) {
      Map<String, Object> cj = new LinkedHashMap<>();
      cj.put("latencies_us", lat.get(c));
      cj.put("queries", cats.get(c).queries());
      catJson.put(cats.get(c).name(), cj);
    }
    if (sink == 42) System.err.print("");
  }

  /** Untimed passes over the whole query set: at least --warmup-passes and --warmup-seconds. */
  static long warmUp(IndexSearcher s, Query[][] parsed, int[][] order, Args args, Map<String, Object> out)
      throws IOException {
    long sink = 0;
    int passes = 0;
    long t0 = System.nanoTime();
    while (passes < args.warmupPasses || secs(System.nanoTime() - t0) < args.warmupSeconds) {
      for (int[] ci : order) sink += s.search(parsed[ci[0]][ci[1]], args.topK).scoreDocs.length;
      passes++;
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("passes", passes);
    m.put("seconds", secs(System.nanoTime() - t0));
    out.put("warmup", m);
    return sink;
  }

  /**
   * Ingest-to-visible summary in µs over ns[0..n): percentile p = sorted[round((n-1)*p)] (as in
   * spirit-bench); nulls when n = 0.
   */
  static Map<String, Object> visibilityJson(long[] ns, int n, int notVisible) {
    long[] a = Arrays.copyOf(ns, n);
    Arrays.sort(a);
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("method", "reopen");
    m.put("docs_measured", n);
    m.put("not_visible_during_run", notVisible);
    m.put("p50_us", n == 0 ? null : micros(a[(int) Math.round((n - 1) * 0.5)]));
    m.put("p99_us", n == 0 ? null : micros(a[(int) Math.round((n - 1) * 0.99)]));
    m.put("p999_us", n == 0 ? null : micros(a[(int) Math.round((n - 1) * 0.999)]));
    m.put("max_us", n == 0 ? null : micros(a[n - 1]));
    m.put("mean_us", n == 0 ? null : micros(Arrays.stream(a).sum()) / n);
    return m;
  }

  static Map<String, Object> ingestJson(long docs, double seconds) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("docs", docs);
    m.put("seconds", seconds);
    m.put("docs_per_sec", seconds > 0 ? docs / seconds : 0.0);
    return m;
  }

  // ------------------------------------------------------------------ summary

  static double pct(double[] sorted, double p) {
    if (sorted.length == 0) return 0;
    int rank = (int) Math.ceil(p / 100.0 * sorted.length);
    rank = Math.max(1, Math.min(sorted.length, rank));
    return sorted[rank - 1];
  }

  static String fmtUs(Object us) {
    return us == null ? "-" : String.format("%.0f", (Double) us);
  }

  @SuppressWarnings("unchecked")
  static void summary(Map<String, Object> out) {
    Map<String, Object> ingest = (Map<String, Object>) out.get("ingest");
    System.err.printf(
        "[%s] %s mode=%s K=%s docs=%s ingest: %s docs in %.2fs = %.0f docs/s, index %.1f MB, peak RSS %.0f MB%n",
        out.get("engine"),
        out.get("version"),
        out.get("mode"),
        out.get("reopen_every"),
        out.get("docs"),
        ingest.get("docs"),
        (Double) ingest.get("seconds"),
        (Double) ingest.get("docs_per_sec"),
        ((Number) out.get("index_bytes")).doubleValue() / 1e6,
        ((Number) out.get("peak_rss_bytes")).doubleValue() / 1e6);
    Map<String, Object> nrt = (Map<String, Object>) out.get("nrt");
    if (nrt != null) {
      System.err.printf(
          "  nrt: %s queries, %s reopens (mean %.0f us, max %.0f us), visible at last query %s%n",
          nrt.get("queries_run"),
          nrt.get("reopens"),
          (Double) nrt.get("reopen_us_mean"),
          (Double) nrt.get("reopen_us_max"),
          nrt.get("visible_docs_at_last_query"));
      Map<String, Object> v = (Map<String, Object>) nrt.get("visibility");
      System.err.printf(
          "  ingest-to-visible: %s docs timed, %s not visible during run; p50 %s us, p99 %s us, p99.9 %s us,"
              + " max %s us, mean %s us%n",
          v.get("docs_measured"),
          v.get("not_visible_during_run"),
          fmtUs(v.get("p50_us")),
          fmtUs(v.get("p99_us")),
          fmtUs(v.get("p999_us")),
          fmtUs(v.get("max_us")),
          fmtUs(v.get("mean_us")));
    }
    if (out.get("open_seconds") != null)
      System.err.printf("  open after restart: %.1f ms%n", (Double) out.get("open_seconds") * 1e3);
    System.err.printf(
        "  %-12s %6s %10s %10s %10s %10s%n", "category", "n", "mean_us", "p50_us", "p90_us", "p99_us");
    Map<String, Object> cats = (Map<String, Object>) out.get("categories");
    for (Map.Entry<String, Object> e : cats.entrySet()) {
      List<Double> l = (List<Double>) ((Map<String, Object>) e.getValue()).get("latencies_us");
      double[] a = l.stream().mapToDouble(Double::doubleValue).toArray();
      Arrays.sort(a);
      double mean = a.length == 0 ? 0 : Arrays.stream(a).sum() / a.length;
      System.err.printf(
          "  %-12s %6d %10.1f %10.1f %10.1f %10.1f%n",
          e.getKey(), a.length, mean, pct(a, 50), pct(a, 90), pct(a, 99));
    }
  }

  // ------------------------------------------------------------------ JSON

  static final class Json {
    static void write(StringBuilder sb, Object v, int indent) {
      if (v == null) {
        sb.append("null");
      } else if (v instanceof String str) {
        string(sb, str);
      } else if (v instanceof Double d) {
        if (d.isNaN() || d.isInfinite()) sb.append("null");
        else if (d == Math.rint(d) && Math.abs(d) < 1e15) sb.append((long) (double) d).append(".0");
        else sb.append(d);
      } else if (v instanceof Float f) {
        write(sb, (double) f, indent);
      } else if (v instanceof Number || v instanceof Boolean) {
        sb.append(v);
      } else if (v instanceof Map<?, ?> m) {
        if (m.isEmpty()) {
          sb.append("{}");
          return;
        }
        sb.append("{\n");
        int i = 0;
        for (Map.Entry<?, ?> e : m.entrySet()) {
          pad(sb, indent + 2);
          string(sb, String.valueOf(e.getKey()));
          sb.append(": ");
          write(sb, e.getValue(), indent + 2);
          if (++i < m.size()) sb.append(',');
          sb.append('\n');
        }
        pad(sb, indent);
        sb.append('}');
      } else if (v instanceof List<?> l) {
        // lists of scalars on one line, lists of lists one element per line
        boolean nested = !l.isEmpty() && (l.get(0) instanceof List || l.get(0) instanceof Map);
        sb.append('[');
        for (int i = 0; i < l.size(); i++) {
          if (nested) {
            sb.append('\n');
            pad(sb, indent + 2);
          }
          write(sb, l.get(i), indent + 2);
          if (i + 1 < l.size()) sb.append(nested ? "," : ", ");
        }
        if (nested) {
          sb.append('\n');
          pad(sb, indent);
        }
        sb.append(']');
      } else {
        string(sb, v.toString());
      }
    }

    static void pad(StringBuilder sb, int n) {
      for (int i = 0; i < n; i++) sb.append(' ');
    }

    static void string(StringBuilder sb, String s) {
      sb.append('"');
      for (int i = 0; i < s.length(); i++) {
        char c = s.charAt(i);
        switch (c) {
          case '"' -> sb.append("\\\"");
          case '\\' -> sb.append("\\\\");
          case '\n' -> sb.append("\\n");
          case '\r' -> sb.append("\\r");
          case '\t' -> sb.append("\\t");
          default -> {
            if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
          }
        }
      }
      sb.append('"');
    }
  }

  private Main() {}
}
