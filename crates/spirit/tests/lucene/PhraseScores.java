// The Lucene side of tests/lucene_parity.rs: exact and sloppy phrase scores, dis-max scores with tie
// breakers and fuzzy term scores, on a few documents, printed as
// `QUERY ~SLOP: DOC=SCORE ...`. Run with the Lucene core jar the benchmark's Maven build fetches:
//   CP=~/.m2/repository/org/apache/lucene/lucene-core/10.4.0/lucene-core-10.4.0.jar
//   javac -cp $CP PhraseScores.java && java -cp $CP:. PhraseScores
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.store.*;
public class PhraseScores {
  public static void main(String[] a) throws Exception {
    Directory d = new ByteBuffersDirectory();
    IndexWriter w = new IndexWriter(d, new IndexWriterConfig(new StandardAnalyzer(org.apache.lucene.analysis.CharArraySet.EMPTY_SET)));
    String[] docs = {"quick fox a b", "quick x fox a", "fox quick a b", "quick x y fox", "quick fox quick x fox fox quick", "a a x a b a", "to be or not to be x to be"};
    for (String s : docs) { Document doc = new Document(); doc.add(new TextField("body", s, Field.Store.YES)); w.addDocument(doc); }
    w.close();
    IndexSearcher s = new IndexSearcher(DirectoryReader.open(d));
    String[][] qs = {{"quick","fox"},{"a","a"},{"a","b"},{"to","be","or","not","to","be"},{"fox","quick"},{"quick","x","fox"}};
    for (String[] q : qs) for (int slop : new int[]{0,1,2,3}) {
      PhraseQuery.Builder b = new PhraseQuery.Builder(); for (String t : q) b.add(new Term("body", t)); b.setSlop(slop);
      TopDocs td = s.search(b.build(), 10);
      StringBuilder sb = new StringBuilder(String.join(" ", q) + " ~" + slop + ":");
      for (ScoreDoc sd : td.scoreDocs) sb.append(" " + sd.doc + "=" + sd.score);
      System.out.println(sb);
    }
    // Phrase prefixes (Elasticsearch's match_phrase_prefix: a MultiPhraseQuery whose last position is every
    // term of the field starting with the last word, in term order, up to max_expansions = 50), with slop.
    String[][] pqs = {{"to","b"},{"a","b"},{"quick","q"},{"quick","x","f"},{"a","a"},{"fox","q"}};
    for (String[] q : pqs) for (int slop : new int[]{0,1,2,3}) {
      MultiPhraseQuery.Builder b = new MultiPhraseQuery.Builder();
      for (int i = 0; i < q.length - 1; i++) b.add(new Term("body", q[i]));
      java.util.List<Term> exp = new java.util.ArrayList<>();
      for (LeafReaderContext lc : s.getIndexReader().leaves()) {
        TermsEnum te = lc.reader().terms("body").iterator();
        if (te.seekCeil(new org.apache.lucene.util.BytesRef(q[q.length - 1])) != TermsEnum.SeekStatus.END) {
          do {
            String t = te.term().utf8ToString();
            if (!t.startsWith(q[q.length - 1]) || exp.size() == 50) break;
            exp.add(new Term("body", t));
          } while (te.next() != null);
        }
      }
      b.add(exp.toArray(new Term[0]));
      b.setSlop(slop);
      TopDocs td = s.search(b.build(), 10);
      StringBuilder sb = new StringBuilder("prefix " + String.join(" ", q) + " ~" + slop + ":");
      for (ScoreDoc sd : td.scoreDocs) sb.append(" " + sd.doc + "=" + sd.score);
      System.out.println(sb);
    }
    // Fuzzy terms (FuzzyQuery: max edits, prefix length, max expansions, transpositions) on their own documents.
    Directory fd = new ByteBuffersDirectory();
    IndexWriter fw = new IndexWriter(fd, new IndexWriterConfig(new StandardAnalyzer(org.apache.lucene.analysis.CharArraySet.EMPTY_SET)));
    String[] fdocs = {"hello world", "help me hello", "hallo hallo welt", "jello shot", "yellow hell", "helo", "hero held", "world wide web", "hell hello", "abc ca", "ac bca cab", "hellooo", "he", "hxllo hexlo helxo", "héllo", "ehllo wrold"};
    for (String t : fdocs) { Document doc = new Document(); doc.add(new TextField("body", t, Field.Store.YES)); fw.addDocument(doc); }
    fw.close();
    IndexSearcher fs = new IndexSearcher(DirectoryReader.open(fd));
    Object[][] fqs = {{"helo", 2, 0, 50, true}, {"hello", 2, 0, 3, true}, {"hello", 1, 2, 50, true}, {"ehllo", 1, 0, 50, true}, {"ehllo", 1, 0, 50, false}, {"ca", 2, 0, 50, true}, {"world", 1, 0, 50, true}, {"wlord", 2, 1, 50, true}, {"zzzzzz", 2, 0, 50, true}};
    for (Object[] q : fqs) {
      Query fq = new FuzzyQuery(new Term("body", (String) q[0]), (Integer) q[1], (Integer) q[2], (Integer) q[3], (Boolean) q[4]);
      TopDocs td = fs.search(fq, 20);
      StringBuilder sb = new StringBuilder("fuzzy " + q[0] + " " + q[1] + " " + q[2] + " " + q[3] + " " + q[4] + ":");
      for (ScoreDoc sd : td.scoreDocs) sb.append(" " + sd.doc + "=" + sd.score);
      System.out.println(sb);
    }
    // dis_max of terms with tie breakers.
    for (float tie : new float[]{0f, 0.3f, 1f}) {
      java.util.List<Query> terms = new java.util.ArrayList<>();
      for (String t : new String[]{"quick", "fox", "a"}) terms.add(new TermQuery(new Term("body", t)));
      TopDocs td = s.search(new DisjunctionMaxQuery(terms, tie), 10);
      StringBuilder sb = new StringBuilder("dismax quick fox a ~" + tie + ":");
      for (ScoreDoc sd : td.scoreDocs) sb.append(" " + sd.doc + "=" + sd.score);
      System.out.println(sb);
    }
  }
}
